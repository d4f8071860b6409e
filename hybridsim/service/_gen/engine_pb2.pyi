from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_SIMULATE: _ClassVar[Mode]
    MODE_PREDICT: _ClassVar[Mode]
MODE_UNSPECIFIED: Mode
MODE_SIMULATE: Mode
MODE_PREDICT: Mode

class EngineRequest(_message.Message):
    __slots__ = ("start", "mode_answer", "predict_answer")
    START_FIELD_NUMBER: _ClassVar[int]
    MODE_ANSWER_FIELD_NUMBER: _ClassVar[int]
    PREDICT_ANSWER_FIELD_NUMBER: _ClassVar[int]
    start: Start
    mode_answer: ModeAnswer
    predict_answer: PredictAnswer
    def __init__(self, start: _Optional[_Union[Start, _Mapping]] = ..., mode_answer: _Optional[_Union[ModeAnswer, _Mapping]] = ..., predict_answer: _Optional[_Union[PredictAnswer, _Mapping]] = ...) -> None: ...

class Start(_message.Message):
    __slots__ = ("scenario_yaml", "has_seed", "seed", "base_dir", "director", "keep_background", "samples", "record_batch")
    SCENARIO_YAML_FIELD_NUMBER: _ClassVar[int]
    HAS_SEED_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BASE_DIR_FIELD_NUMBER: _ClassVar[int]
    DIRECTOR_FIELD_NUMBER: _ClassVar[int]
    KEEP_BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCH_FIELD_NUMBER: _ClassVar[int]
    scenario_yaml: str
    has_seed: bool
    seed: int
    base_dir: str
    director: bool
    keep_background: bool
    samples: bool
    record_batch: int
    def __init__(self, scenario_yaml: _Optional[str] = ..., has_seed: _Optional[bool] = ..., seed: _Optional[int] = ..., base_dir: _Optional[str] = ..., director: _Optional[bool] = ..., keep_background: _Optional[bool] = ..., samples: _Optional[bool] = ..., record_batch: _Optional[int] = ...) -> None: ...

class ModeAnswer(_message.Message):
    __slots__ = ("call_id", "mode")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    mode: Mode
    def __init__(self, call_id: _Optional[int] = ..., mode: _Optional[_Union[Mode, str]] = ...) -> None: ...

class PredictAnswer(_message.Message):
    __slots__ = ("call_id", "durations")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DURATIONS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    durations: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, call_id: _Optional[int] = ..., durations: _Optional[_Iterable[float]] = ...) -> None: ...

class EngineEvent(_message.Message):
    __slots__ = ("started", "records", "samples", "mode_call", "predict_call", "done")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MODE_CALL_FIELD_NUMBER: _ClassVar[int]
    PREDICT_CALL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    started: Started
    records: Records
    samples: Samples
    mode_call: ModeCall
    predict_call: PredictCall
    done: Done
    def __init__(self, started: _Optional[_Union[Started, _Mapping]] = ..., records: _Optional[_Union[Records, _Mapping]] = ..., samples: _Optional[_Union[Samples, _Mapping]] = ..., mode_call: _Optional[_Union[ModeCall, _Mapping]] = ..., predict_call: _Optional[_Union[PredictCall, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ("session", "jobs", "seed")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    session: str
    jobs: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    def __init__(self, session: _Optional[str] = ..., jobs: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ...) -> None: ...

class Records(_message.Message):
    __slots__ = ("jobs", "job", "job_id", "rank", "iteration", "start", "end", "simulated", "final")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedScalarFieldContainer[str]
    job: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[int]
    rank: _containers.RepeatedScalarFieldContainer[int]
    iteration: _containers.RepeatedScalarFieldContainer[int]
    start: _containers.RepeatedScalarFieldContainer[float]
    end: _containers.RepeatedScalarFieldContainer[float]
    simulated: _containers.RepeatedScalarFieldContainer[bool]
    final: bool
    def __init__(self, jobs: _Optional[_Iterable[str]] = ..., job: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[int]] = ..., rank: _Optional[_Iterable[int]] = ..., iteration: _Optional[_Iterable[int]] = ..., start: _Optional[_Iterable[float]] = ..., end: _Optional[_Iterable[float]] = ..., simulated: _Optional[_Iterable[bool]] = ..., final: _Optional[bool] = ...) -> None: ...

class SampleBlock(_message.Message):
    __slots__ = ("t_end", "interval", "radix", "features", "values", "meta_json")
    T_END_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RADIX_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    META_JSON_FIELD_NUMBER: _ClassVar[int]
    t_end: _containers.RepeatedScalarFieldContainer[float]
    interval: float
    radix: int
    features: _containers.RepeatedScalarFieldContainer[str]
    values: _common_pb2.Tensor
    meta_json: str
    def __init__(self, t_end: _Optional[_Iterable[float]] = ..., interval: _Optional[float] = ..., radix: _Optional[int] = ..., features: _Optional[_Iterable[str]] = ..., values: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., meta_json: _Optional[str] = ...) -> None: ...

class Samples(_message.Message):
    __slots__ = ("blocks", "final")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[SampleBlock]
    final: bool
    def __init__(self, blocks: _Optional[_Iterable[_Union[SampleBlock, _Mapping]]] = ..., final: _Optional[bool] = ...) -> None: ...

class ModeCall(_message.Message):
    __slots__ = ("call_id", "job_id", "iteration")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    job_id: int
    iteration: int
    def __init__(self, call_id: _Optional[int] = ..., job_id: _Optional[int] = ..., iteration: _Optional[int] = ...) -> None: ...

class PredictCall(_message.Message):
    __slots__ = ("call_id", "job_id", "iteration", "ranks", "starts")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    job_id: int
    iteration: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    starts: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, call_id: _Optional[int] = ..., job_id: _Optional[int] = ..., iteration: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., starts: _Optional[_Iterable[float]] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ("events", "end_time", "job_end", "wall_s", "partial", "link_totals_json", "stats_json", "records_as_streamed", "ports_as_streamed", "has_ports", "director_calls")
    class JobEndEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_END_FIELD_NUMBER: _ClassVar[int]
    WALL_S_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    LINK_TOTALS_JSON_FIELD_NUMBER: _ClassVar[int]
    STATS_JSON_FIELD_NUMBER: _ClassVar[int]
    RECORDS_AS_STREAMED_FIELD_NUMBER: _ClassVar[int]
    PORTS_AS_STREAMED_FIELD_NUMBER: _ClassVar[int]
    HAS_PORTS_FIELD_NUMBER: _ClassVar[int]
    DIRECTOR_CALLS_FIELD_NUMBER: _ClassVar[int]
    events: int
    end_time: float
    job_end: _containers.ScalarMap[str, float]
    wall_s: float
    partial: bool
    link_totals_json: str
    stats_json: str
    records_as_streamed: bool
    ports_as_streamed: bool
    has_ports: bool
    director_calls: int
    def __init__(self, events: _Optional[int] = ..., end_time: _Optional[float] = ..., job_end: _Optional[_Mapping[str, float]] = ..., wall_s: _Optional[float] = ..., partial: _Optional[bool] = ..., link_totals_json: _Optional[str] = ..., stats_json: _Optional[str] = ..., records_as_streamed: _Optional[bool] = ..., ports_as_streamed: _Optional[bool] = ..., has_ports: _Optional[bool] = ..., director_calls: _Optional[int] = ...) -> None: ...

class EngineStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineStatusReply(_message.Message):
    __slots__ = ("active_runs", "total_runs", "max_runs")
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    active_runs: int
    total_runs: int
    max_runs: int
    def __init__(self, active_runs: _Optional[int] = ..., total_runs: _Optional[int] = ..., max_runs: _Optional[int] = ...) -> None: ...
