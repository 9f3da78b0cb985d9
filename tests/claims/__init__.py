"""The claims stage of the test command: what the toolkit claims of its emulation, each judged on real
runs by the instrument's own verdict (held, broken or inconclusive; claims/verdict.py).

    PYTHONPATH=tests .venv/bin/python -m claims            every claim (make claims)
    PYTHONPATH=tests .venv/bin/python -m claims --list     the scenarios and their claims
    PYTHONPATH=tests .venv/bin/python -m claims --fault F  plant F and show the claims it must break broken
"""
