from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StampedColumnBlock(_message.Message):
    __slots__ = ("name", "values", "hlcs", "client_ids")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    HLCS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    values: bytes
    hlcs: _containers.RepeatedScalarFieldContainer[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., values: _Optional[bytes] = ..., hlcs: _Optional[_Iterable[int]] = ..., client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class StampedBlock(_message.Message):
    __slots__ = ("table", "row_ids", "hlcs", "client_ids", "delete_hlcs", "delete_client_ids", "positions", "columns")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    HLCS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    DELETE_HLCS_FIELD_NUMBER: _ClassVar[int]
    DELETE_CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    table: str
    row_ids: _containers.RepeatedScalarFieldContainer[str]
    hlcs: _containers.RepeatedScalarFieldContainer[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    delete_hlcs: _containers.RepeatedScalarFieldContainer[int]
    delete_client_ids: _containers.RepeatedScalarFieldContainer[str]
    positions: _containers.RepeatedScalarFieldContainer[int]
    columns: _containers.RepeatedCompositeFieldContainer[StampedColumnBlock]
    def __init__(self, table: _Optional[str] = ..., row_ids: _Optional[_Iterable[str]] = ..., hlcs: _Optional[_Iterable[int]] = ..., client_ids: _Optional[_Iterable[str]] = ..., delete_hlcs: _Optional[_Iterable[int]] = ..., delete_client_ids: _Optional[_Iterable[str]] = ..., positions: _Optional[_Iterable[int]] = ..., columns: _Optional[_Iterable[_Union[StampedColumnBlock, _Mapping]]] = ...) -> None: ...

class StampedSyncResponse(_message.Message):
    __slots__ = ("server_hlc", "has_more", "blocks")
    SERVER_HLC_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    server_hlc: int
    has_more: bool
    blocks: _containers.RepeatedCompositeFieldContainer[StampedBlock]
    def __init__(self, server_hlc: _Optional[int] = ..., has_more: _Optional[bool] = ..., blocks: _Optional[_Iterable[_Union[StampedBlock, _Mapping]]] = ...) -> None: ...
