"""`fabricscope store ddl`: the store's schema as SQL, for one node or a named ClickHouse cluster."""

from __future__ import annotations

import sys

import typer

store_app = typer.Typer(name="store", help="The ClickHouse store's schema.", no_args_is_help=True)


@store_app.command("ddl")
def ddl(cluster: str = typer.Option(None, "--cluster", help="render for this cluster of remote_servers: "
                                    "ON CLUSTER, Replicated*MergeTree with {shard}/{replica}, Distributed "
                                    "tables (docs/clusters.md)")) -> None:
    """Print every migration as SQL, to apply by hand (clickhouse-client --multiquery < file)."""
    from schemas.cluster_ddl import ClusterDDLError, ddl_script

    try:
        sys.stdout.write(ddl_script(cluster))
    except ClusterDDLError as err:
        typer.echo(f"store ddl: {err}", err=True)
        raise typer.Exit(2) from None
