"""The REST API (Litestar): routes per concern, each a thin layer over the service and
the projections' typed readers."""
