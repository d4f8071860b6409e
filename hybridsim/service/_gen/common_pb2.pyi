from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DTYPE_UNSPECIFIED: _ClassVar[Tensor.DType]
        FLOAT32: _ClassVar[Tensor.DType]
        FLOAT64: _ClassVar[Tensor.DType]
        INT64: _ClassVar[Tensor.DType]
        BOOL: _ClassVar[Tensor.DType]
    DTYPE_UNSPECIFIED: Tensor.DType
    FLOAT32: Tensor.DType
    FLOAT64: Tensor.DType
    INT64: Tensor.DType
    BOOL: Tensor.DType
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: Tensor.DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[_Union[Tensor.DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...
