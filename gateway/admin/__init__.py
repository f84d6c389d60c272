"""Runtime tenants and keys made through the admin API, their audit trail and console
sessions: in Redis for a fleet, in memory for one process, behind one contract."""

from gateway.admin.admin_store import AdminStore
from gateway.admin.change import Applied, AuditEntry, Change, Expect
from gateway.admin.memory_admin_store import MemoryAdminStore
from gateway.admin.records import AdminSnapshot, KeyRecord, RevokedKeys, TenantRecord
from gateway.admin.redis_admin_store import RedisAdminStore

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
    "RevokedKeys",
    "TenantRecord",
]
