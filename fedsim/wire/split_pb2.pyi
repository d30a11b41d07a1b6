from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OWN_DATA: _ClassVar[Role]
    PARTITION: _ClassVar[Role]
    BACKUP: _ClassVar[Role]
    OBSERVE: _ClassVar[Role]
OWN_DATA: Role
PARTITION: Role
BACKUP: Role
OBSERVE: Role

class OpenSessionRequest(_message.Message):
    __slots__ = ("device", "token", "role", "partition")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    device: str
    token: str
    role: Role
    partition: int
    def __init__(self, device: _Optional[str] = ..., token: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., partition: _Optional[int] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "model", "split_layer", "hidden_size", "num_labels", "max_length", "max_message_bytes", "codec", "partition", "partition_batches", "retry_after_s", "partitions")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_LAYER_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_LABELS_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_BATCHES_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    model: str
    split_layer: int
    hidden_size: int
    num_labels: int
    max_length: int
    max_message_bytes: int
    codec: str
    partition: int
    partition_batches: int
    retry_after_s: float
    partitions: int
    def __init__(self, session_id: _Optional[str] = ..., model: _Optional[str] = ..., split_layer: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_labels: _Optional[int] = ..., max_length: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., codec: _Optional[str] = ..., partition: _Optional[int] = ..., partition_batches: _Optional[int] = ..., retry_after_s: _Optional[float] = ..., partitions: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("codec", "dtype", "shape", "payload", "lengths", "labels")
    CODEC_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    codec: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    payload: bytes
    lengths: _containers.RepeatedScalarFieldContainer[int]
    labels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, codec: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., payload: _Optional[bytes] = ..., lengths: _Optional[_Iterable[int]] = ..., labels: _Optional[_Iterable[int]] = ...) -> None: ...

class StepReply(_message.Message):
    __slots__ = ("step", "loss", "examples")
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    step: int
    loss: float
    examples: int
    def __init__(self, step: _Optional[int] = ..., loss: _Optional[float] = ..., examples: _Optional[int] = ...) -> None: ...

class EvalReply(_message.Message):
    __slots__ = ("examples", "correct", "accuracy", "loss")
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    CORRECT_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    examples: int
    correct: int
    accuracy: float
    loss: float
    def __init__(self, examples: _Optional[int] = ..., correct: _Optional[int] = ..., accuracy: _Optional[float] = ..., loss: _Optional[float] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeviceStatus(_message.Message):
    __slots__ = ("device", "batches", "examples", "bytes_received", "rejected", "last_loss", "active", "partition")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_LOSS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    device: str
    batches: int
    examples: int
    bytes_received: int
    rejected: int
    last_loss: float
    active: bool
    partition: int
    def __init__(self, device: _Optional[str] = ..., batches: _Optional[int] = ..., examples: _Optional[int] = ..., bytes_received: _Optional[int] = ..., rejected: _Optional[int] = ..., last_loss: _Optional[float] = ..., active: _Optional[bool] = ..., partition: _Optional[int] = ...) -> None: ...

class MemberEvent(_message.Message):
    __slots__ = ("at", "step", "kind", "device", "partition")
    AT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    at: float
    step: int
    kind: str
    device: str
    partition: int
    def __init__(self, at: _Optional[float] = ..., step: _Optional[int] = ..., kind: _Optional[str] = ..., device: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("step", "examples", "uptime_s", "checkpoints", "devices", "joins", "leaves", "lost", "takeovers", "active", "standby", "max_steps", "events")
    STEP_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    JOINS_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    TAKEOVERS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    STANDBY_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    step: int
    examples: int
    uptime_s: float
    checkpoints: int
    devices: _containers.RepeatedCompositeFieldContainer[DeviceStatus]
    joins: int
    leaves: int
    lost: int
    takeovers: int
    active: int
    standby: int
    max_steps: int
    events: _containers.RepeatedCompositeFieldContainer[MemberEvent]
    def __init__(self, step: _Optional[int] = ..., examples: _Optional[int] = ..., uptime_s: _Optional[float] = ..., checkpoints: _Optional[int] = ..., devices: _Optional[_Iterable[_Union[DeviceStatus, _Mapping]]] = ..., joins: _Optional[int] = ..., leaves: _Optional[int] = ..., lost: _Optional[int] = ..., takeovers: _Optional[int] = ..., active: _Optional[int] = ..., standby: _Optional[int] = ..., max_steps: _Optional[int] = ..., events: _Optional[_Iterable[_Union[MemberEvent, _Mapping]]] = ...) -> None: ...
