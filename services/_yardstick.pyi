# Typing stub for the Cython module services/_yardstick.pyx (mypy reads this, not the .pyx).
import numpy.typing as npt

def yardstick(allocatable: npt.ArrayLike, requests: npt.ArrayLike, target: int) -> float: ...
