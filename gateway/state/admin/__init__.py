"""Runtime tenants and keys made through the admin API, their audit trail and console
sessions: in Redis for a fleet, in memory for one process, behind one contract."""

from gateway.state.admin.change import Applied, AuditEntry, Change, Expect
from gateway.state.admin.memory import MemoryAdminStore
from gateway.state.admin.records import AdminSnapshot, KeyRecord, TenantRecord
from gateway.state.admin.redis_store import RedisAdminStore
from gateway.state.admin.store import AdminStore

__all__ = [
    "AdminSnapshot",
    "AdminStore",
    "Applied",
    "AuditEntry",
    "Change",
    "Expect",
    "KeyRecord",
    "MemoryAdminStore",
    "RedisAdminStore",
    "TenantRecord",
]
