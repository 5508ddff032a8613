# Typing stub for the Cython module services/store/_page.pyx (mypy reads this, not the .pyx).

PAGE_SQL: str

def split_page(page: bytes | bytearray | memoryview | None) -> list[tuple[int, bytes]]: ...
