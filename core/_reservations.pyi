def _py_next_reservation(
    resv: int,
    limit: int,
    usage: int,
    dt: float,
    holding: bool,
    tau: float,
    margin: float,
    overcommit: bool,
) -> int: ...
