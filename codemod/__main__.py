from pmap_migrate.cli import entry

if __name__ == "__main__":
    try:
        entry()
    finally:
        # CPython (3.11, 3.12): a KeyboardInterrupt that ends a string `exec` or `eval` (dataclasses
        # and named tuples are made by one, e.g. while a module loads) marks the interrupt unhandled
        # even when it is caught, and under `python -m` the process then kills itself with SIGINT at
        # exit instead of exiting with the code we chose (130). Each string `exec` clears the mark
        # first; this one ends normally and leaves it clear.
        exec("")
