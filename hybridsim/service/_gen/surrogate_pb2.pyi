from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenJobRequest(_message.Message):
    __slots__ = ("job", "workload", "ranks", "rank_port", "mask")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    RANK_PORT_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    job: str
    workload: str
    ranks: int
    rank_port: _containers.RepeatedScalarFieldContainer[int]
    mask: _common_pb2.Tensor
    def __init__(self, job: _Optional[str] = ..., workload: _Optional[str] = ..., ranks: _Optional[int] = ..., rank_port: _Optional[_Iterable[int]] = ..., mask: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class OpenJobReply(_message.Message):
    __slots__ = ("job", "replaced")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    job: str
    replaced: bool
    def __init__(self, job: _Optional[str] = ..., replaced: _Optional[bool] = ...) -> None: ...

class CloseJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class CloseJobReply(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("job", "ranks", "lookback", "history", "graphs", "iteration", "rank_port")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    LOOKBACK_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    RANK_PORT_FIELD_NUMBER: _ClassVar[int]
    job: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    lookback: int
    history: _containers.RepeatedScalarFieldContainer[float]
    graphs: _common_pb2.Tensor
    iteration: int
    rank_port: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., lookback: _Optional[int] = ..., history: _Optional[_Iterable[float]] = ..., graphs: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., iteration: _Optional[int] = ..., rank_port: _Optional[_Iterable[int]] = ...) -> None: ...

class PredictReply(_message.Message):
    __slots__ = ("durations", "model_version")
    DURATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    durations: _containers.RepeatedScalarFieldContainer[float]
    model_version: int
    def __init__(self, durations: _Optional[_Iterable[float]] = ..., model_version: _Optional[int] = ...) -> None: ...

class TuneRequest(_message.Message):
    __slots__ = ("job", "ranks", "first_iteration", "window", "durations", "graphs", "fit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    FIRST_ITERATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    DURATIONS_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    first_iteration: int
    window: int
    durations: _containers.RepeatedScalarFieldContainer[float]
    graphs: _common_pb2.Tensor
    fit: bool
    def __init__(self, job: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., first_iteration: _Optional[int] = ..., window: _Optional[int] = ..., durations: _Optional[_Iterable[float]] = ..., graphs: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., fit: _Optional[bool] = ...) -> None: ...

class TuneReply(_message.Message):
    __slots__ = ("model_version", "metrics", "truth_values")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TRUTH_VALUES_FIELD_NUMBER: _ClassVar[int]
    model_version: int
    metrics: _containers.ScalarMap[str, float]
    truth_values: int
    def __init__(self, model_version: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., truth_values: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("model", "config_json", "model_version", "lookback", "needs_graphs", "jobs", "truth_values", "predictions", "predict_calls", "tune_calls", "in_flight", "max_in_flight", "job_names")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOOKBACK_FIELD_NUMBER: _ClassVar[int]
    NEEDS_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TRUTH_VALUES_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    PREDICT_CALLS_FIELD_NUMBER: _ClassVar[int]
    TUNE_CALLS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    JOB_NAMES_FIELD_NUMBER: _ClassVar[int]
    model: str
    config_json: str
    model_version: int
    lookback: int
    needs_graphs: bool
    jobs: int
    truth_values: int
    predictions: int
    predict_calls: int
    tune_calls: int
    in_flight: int
    max_in_flight: int
    job_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., config_json: _Optional[str] = ..., model_version: _Optional[int] = ..., lookback: _Optional[int] = ..., needs_graphs: _Optional[bool] = ..., jobs: _Optional[int] = ..., truth_values: _Optional[int] = ..., predictions: _Optional[int] = ..., predict_calls: _Optional[int] = ..., tune_calls: _Optional[int] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., job_names: _Optional[_Iterable[str]] = ...) -> None: ...

class SaveRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SaveReply(_message.Message):
    __slots__ = ("path", "model_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    model_version: int
    def __init__(self, path: _Optional[str] = ..., model_version: _Optional[int] = ...) -> None: ...
