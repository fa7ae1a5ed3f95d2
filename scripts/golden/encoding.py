"""The JSON encoding of MLX arrays shared by the fixture scripts of this folder
(make_nn_fixtures.py, make_lm_fixtures.py): {"dtype", "shape", "data"}, float32
values as the shortest decimals that read back to them."""

import mlx.core as mx
import numpy as np

DTYPE_NAMES = {mx.float32: "float32", mx.uint32: "uint32", mx.uint64: "uint64",
               mx.int32: "int32", mx.bool_: "bool"}


def enc_float(v):
    """A float32 value as the shortest decimal that reads back to it.

    The JSON number, parsed as a float64 and rounded to float32, gives v
    exactly; this is checked, also for a float64 parse that is off by one
    ulp (serde_json's default parser), falling back to v's exact decimal.
    """
    v = np.float32(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    short = float(str(v))
    if all(np.float32(d) == v and np.signbit(np.float32(d)) == np.signbit(v)
           for d in (short, np.nextafter(short, np.inf),
                     np.nextafter(short, -np.inf))):
        return short
    return float(v)


def enc(a):
    """Encode an mx.array as {"dtype", "shape", "data"}."""
    assert isinstance(a, mx.array), type(a)
    name = DTYPE_NAMES[a.dtype]
    flat = np.array(a).reshape(-1).tolist()
    if name == "float32":
        flat = [enc_float(x) for x in flat]
    elif name == "bool":
        flat = [bool(x) for x in flat]
    else:
        flat = [int(x) for x in flat]
    return {"dtype": name, "shape": list(a.shape), "data": flat}


def f32(np_values):
    """float64 values rounded to a float32 mx.array."""
    return mx.array(np.asarray(np_values, dtype=np.float64).astype(np.float32))


def normal(rs, shape, scale=1.0):
    """Normal draws from `rs`, rounded to three decimals."""
    return np.round(rs.normal(size=shape) * scale, 3)
