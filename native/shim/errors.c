/* The text of the CGPU_ERR_* codes of cgpu_api.h.  Calls nothing. */
#include "api.h"
#include "cgpu_macros.h"

EXPORT const char *cgpu_strerror(int code)
{
    switch (code) {
    case CGPU_OK: return "ok";
    case CGPU_ERR_IO: return "cannot open or map the file";
    case CGPU_ERR_FOREIGN: return "not a cgpu ledger (bad magic)";
    case CGPU_ERR_VERSION: return "cgpu ledger of an unsupported layout version";
    case CGPU_ERR_TRUNCATED: return "truncated ledger";
    case CGPU_ERR_CORRUPT: return "corrupt ledger";
    case CGPU_ERR_FULL: return "no free device or process slot";
    case CGPU_ERR_PARSE: return "malformed config or limit variable";
    case CGPU_ERR_LIMIT: return "over the slice";
    default: return "unknown error";
    }
}
