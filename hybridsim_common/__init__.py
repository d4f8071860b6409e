"""The ground floor: the vocabulary every layer of hybridsim shares, importing nothing first-party.

``backend``     the backend/director protocol (``Mode``, ``Director``, ``Backend``, ``SimulationResult``)
``topology``    the 1D Dragonfly, CODES' port numbering and connection files, the SMART port graph
``records``     ``IterationRecord``, ``PortSamples`` and the run tables' one reader/writer
``rundir``      the run-directory format: staging, manifest, digests, ``description.json``
``units``       time, size and bandwidth units
``yamlio``      bounded strict YAML reading with file:line:column locations
``interrupts``  signals as exceptions, and the failure reason a manifest records
``errors``      the command line's error type and exit codes
``plugins``     where a scenario's ``module:name`` plug-ins (policies, custom workloads) may be imported from

``surrogate/`` and ``controllers/`` stand on this package alone; ``hybridsim`` (the scenario, engine, runner and
commands) and the plug-ins (``codes_bridge``) stand on it and on each other as ``tests/test_architecture.py`` says.
"""
