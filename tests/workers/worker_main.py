"""Runs ``twice worker`` in a child process, for when the command is not registered yet."""

from twice.cli.worker_cmd import worker

if __name__ == "__main__":
    worker(prog_name="twice worker")
