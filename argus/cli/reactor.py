"""``argus reactor``: run the reactor on its own, against an existing Ray cluster."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from argus.config import load_config

__all__ = ["reactor"]


async def _run(config_path: str | None, db: str | None, reactor_id: str | None) -> None:
    from argus.rayjobs import AsyncRayGateway
    from argus.rayjobs.target import following_gateway
    from argus.reactor import Reactor
    from projections import open_store

    config = load_config(config_path)
    # Ray is followed, never waited for: while it is away the reactor records capacity
    # unknown and admits nothing; a head that restarts or moves is picked up.
    gateway = AsyncRayGateway(following_gateway(config))
    store = await open_store(db or config.v2.sqlite.db_path, synchronous=config.v2.sqlite.synchronous,
                             shared_url=config.v2.postgres.url)
    engine = Reactor(store, gateway, config, reactor_id=reactor_id)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(engine.stop()))
    try:
        await engine.run()
    finally:
        gateway.close()
        await store.close()


@click.command()
@click.option("--config", "config_path", envvar="ARGUS_CONFIG", help="Argus YAML config file.")
@click.option("--db", help="SQLite database (default: v2.sqlite.db_path).")
@click.option("--reactor-id", help="Name of this reactor (default: host:pid:random).")
def reactor(config_path: str | None, db: str | None, reactor_id: str | None) -> None:
    """Run the reactor: admit queued tasks, submit them to Ray, follow them to the end.

    Several may run: one leads (a lease in the database), the others stand by."""
    from argus.store import LogDamaged

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        asyncio.run(_run(config_path, db, reactor_id))
    except LogDamaged as exc:  # a reactor only writes: it never runs on a damaged log
        raise click.ClickException(str(exc)) from None
