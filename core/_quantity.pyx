"""Test entry point to the C quantity parser (core/_quantity.pxd), as sklearn's _py_*."""

from esched.core._quantity cimport quantity_units


def _py_quantity_units(str resource, object value):
    """The base units the C parser gives ``value`` of ``resource``, or None where it
    leaves ``value`` to :func:`esched.schemas.quantity.to_base_units`."""
    units = quantity_units(value, resource == "cpu")
    return None if units < 0 else units
