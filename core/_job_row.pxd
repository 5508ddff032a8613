# The job fold's reader of a Volcano Job's spec off its stored bytes (core/_job_row.pyx),
# for job_fold_parts (core/_fold_bytes.pyx).
from esched.core._envelope cimport Span

cdef object job_spec_shape(const unsigned char* b, Py_ssize_t n, Span spec)
