/* Python float formatting shared across modules. */
#ifndef MC_CORE_PYFORMAT_H
#define MC_CORE_PYFORMAT_H

#include "megatron.h"

/* repr(float) of Python 3: shortest round-trip digits, "1e-05", "0.0001", "1.0", "inf", "nan". */
MC_API void mc_py_float_repr(char *buf, size_t n, double x);

#endif
