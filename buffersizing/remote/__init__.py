"""`bufsize remote`: one sweep over several machines by SSH."""
