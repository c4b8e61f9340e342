"""Where twice meets other tools' vocabularies: the lab's stdin/stdout boundary (``lab``), the
general decision format (``extended``), retry-policy translations to other tools
(``translations``) and the ``twice.retry`` decorator (``retrying``).

It imports only ``twice.core`` (and Rich for tables).
"""
