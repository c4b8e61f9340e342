"""What users write: a ``Pipeline`` of tasks (write mode, ``reconcile=``, ``safe_repeat``,
acceptance criteria), its schedule, and loading a pipeline file.

Definitions are data: this package validates them and never runs anything. It imports only
``twice.core`` and the error root.
"""
