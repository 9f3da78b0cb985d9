"""Monitors: each reads one data source cheaply (netlink, sysfs, tracepoints), never by forking per sample."""
