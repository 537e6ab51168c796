from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StampedColumn(_message.Message):
    __slots__ = ("column", "value", "hlc", "client_id")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HLC_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    column: str
    value: bytes
    hlc: int
    client_id: str
    def __init__(self, column: _Optional[str] = ..., value: _Optional[bytes] = ..., hlc: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class StampedRow(_message.Message):
    __slots__ = ("op", "table", "row_id", "columns", "hlc", "client_id", "delta_id", "delete_hlc", "delete_client_id", "position")
    OP_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_ID_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    HLC_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_ID_FIELD_NUMBER: _ClassVar[int]
    DELETE_HLC_FIELD_NUMBER: _ClassVar[int]
    DELETE_CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    op: int
    table: str
    row_id: str
    columns: _containers.RepeatedCompositeFieldContainer[StampedColumn]
    hlc: int
    client_id: str
    delta_id: str
    delete_hlc: int
    delete_client_id: str
    position: int
    def __init__(self, op: _Optional[int] = ..., table: _Optional[str] = ..., row_id: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[StampedColumn, _Mapping]]] = ..., hlc: _Optional[int] = ..., client_id: _Optional[str] = ..., delta_id: _Optional[str] = ..., delete_hlc: _Optional[int] = ..., delete_client_id: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class StampedSyncResponse(_message.Message):
    __slots__ = ("deltas", "server_hlc", "has_more")
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    SERVER_HLC_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    deltas: _containers.RepeatedCompositeFieldContainer[StampedRow]
    server_hlc: int
    has_more: bool
    def __init__(self, deltas: _Optional[_Iterable[_Union[StampedRow, _Mapping]]] = ..., server_hlc: _Optional[int] = ..., has_more: _Optional[bool] = ...) -> None: ...
