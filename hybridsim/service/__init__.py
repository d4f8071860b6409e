"""gRPC services: the surrogate prediction service and the remote engine, so the hybrid loop can span processes and
machines (the surrogate on the GPU box, the simulator on CPU nodes, the controller wherever it runs).

* :mod:`hybridsim.service.surrogate_server` -- ``hybridsim.v1.Surrogate``: any :class:`surrogate.base.Surrogate`
  behind ``OpenJob`` / ``Predict`` / ``Tune`` / ``Status`` / ``Save`` (+ gRPC health and server reflection).
* :mod:`hybridsim.service.client` -- :class:`~hybridsim.service.client.RemoteSurrogate`, a ``Surrogate`` whose
  ``predict``/``tune`` run on such a server.
* :mod:`hybridsim.service.engine_server` -- ``hybridsim.v1.Engine``: the embedded engine behind one bidirectional
  stream per run; the director's ``mode_for``/``predict`` calls are forwarded to the client.
* :mod:`hybridsim.service.remote` -- :class:`~hybridsim.service.remote.RemoteBackend`, the client side of the engine
  service with the engine's ``run(director, on_record, on_samples) -> SimulationResult``.
* :mod:`hybridsim.service.cli` -- ``hybridsim serve --grpc HOST:PORT --model CKPT|NAME`` /
  ``--engine HOST:PORT`` (the gRPC options of ``hybridsim serve``).

The ``.proto`` files are in ``protos/hybridsim/v1/``; the generated code in ``_gen/`` is checked in (regenerate with
``scripts/gen_protos.sh``), so only grpcio and protobuf are needed at run time.
"""
