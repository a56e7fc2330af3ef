/* cgpu_api.h has no include guard (cffi reads it verbatim): include it through here. */
#ifndef CGPU_API_GUARD_H
#define CGPU_API_GUARD_H
#include "cgpu_api.h"
#endif
