"""pksim's Python API: the functions the CLI's commands call (each command builds its
result through one of them, then prints it). ``import pksim`` gives them lazily
(``pksim.predict``, ``pksim.search``, ``pksim.sweep``, ``pksim.whatif``,
``pksim.load_system``); docs/api.md shows them in use.

- ``predict``, ``search``, ``load_system``: ``pksim.api.predict``
- ``sweep``, ``whatif``: ``pksim.api.study``
- the keywords both take: ``pksim.api.options.Options``
"""
