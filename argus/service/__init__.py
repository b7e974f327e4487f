"""Command handlers: turn validated requests into events (docs/design.md §1).

The API calls these; nothing here speaks HTTP. Every command appends events and returns
what the caller needs to answer; nothing changes state except through the log.
"""

from argus.service.auth import AuthCache, Principal, hash_token, new_token
from argus.service.commands import CommandError, Commands, NotFound
from argus.service.ids import new_task_id, new_token_id

__all__ = [
    "AuthCache",
    "CommandError",
    "Commands",
    "NotFound",
    "Principal",
    "hash_token",
    "new_task_id",
    "new_token",
    "new_token_id",
]
