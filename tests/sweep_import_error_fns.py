"""A run-function module that cannot be imported (it raises while importing), for the sweep's error tests."""

raise RuntimeError("this module is broken on purpose")


def run(config):  # never reached
    return {}
