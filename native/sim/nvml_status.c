/* The simulated NVML (libnvidia-ml.so.1).  The status readings monitoring
 * tools show (nvidia-smi, gpustat, nvitop): power limits, performance state,
 * modes, encoder/decoder load, ECC counts.  A healthy, idle data-centre GPU.
 * The types are NVML's public ABI; cgpu_nvml.h declares only what cgpu uses. */
#include "nvml_sim.h"
#include <time.h>

typedef int nvmlPstates_t;          /* NVML_PSTATE_0 = 0 */
typedef int nvmlEnableState_t;      /* NVML_FEATURE_DISABLED = 0, ENABLED = 1 */
typedef int nvmlComputeMode_t;      /* NVML_COMPUTEMODE_DEFAULT = 0 */
typedef int nvmlMemoryErrorType_t;  /* corrected 0, uncorrected 1 */
typedef int nvmlEccCounterType_t;   /* volatile 0, aggregate 1 */

typedef struct {
    unsigned int version;
    nvmlTemperatureSensors_t sensorType;
    int temperature;
} nvmlTemperature_v1_t;

#define NVML_TEMPERATURE_V1 (unsigned int)(sizeof(nvmlTemperature_v1_t) | (1u << 24))

#define POWER_LIMIT_MW 700000u
#define POWER_MIN_MW 200000u

#define OUT_PARAM(p)                          \
    do {                                      \
        if (!(p))                             \
            return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

SIM_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temp)
{
    NEED_DEV(device, i);
    OUT_PARAM(temp);
    if (temp->version != NVML_TEMPERATURE_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temp->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    temp->temperature = 40;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    NEED_DEV(device, i);
    OUT_PARAM(limit);
    *limit = POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                              unsigned int *defaultLimit)
{
    return nvmlDeviceGetPowerManagementLimit(device, defaultLimit);
}

SIM_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                  unsigned int *minLimit,
                                                                  unsigned int *maxLimit)
{
    NEED_DEV(device, i);
    OUT_PARAM(minLimit && maxLimit);
    *minLimit = POWER_MIN_MW;
    *maxLimit = POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    NEED_DEV(device, i);
    OUT_PARAM(pState);
    *pState = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    NEED_DEV(device, i);
    OUT_PARAM(mode);
    *mode = 1;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    NEED_DEV(device, i);
    OUT_PARAM(mode);
    *mode = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    NEED_DEV(device, i);
    OUT_PARAM(display);
    *display = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    return nvmlDeviceGetDisplayMode(device, isActive);
}

SIM_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                          nvmlEnableState_t *pending)
{
    NEED_DEV(device, i);
    OUT_PARAM(current && pending);
    *current = *pending = 1;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                 nvmlMemoryErrorType_t errorType,
                                                 nvmlEccCounterType_t counterType,
                                                 unsigned long long *eccCounts)
{
    NEED_DEV(device, i);
    OUT_PARAM(eccCounts);
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eccCounts = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t codec_load(nvmlDevice_t device, unsigned int *utilization,
                               unsigned int *samplingPeriodUs)
{
    NEED_DEV(device, i);
    OUT_PARAM(utilization && samplingPeriodUs);
    *utilization = 0;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    return codec_load(device, utilization, samplingPeriodUs);
}

SIM_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    return codec_load(device, utilization, samplingPeriodUs);
}

/* nvmlDeviceGetFieldValues: the power fields nvidia-smi -q reads for the GPU
 * (scope 0).  The module scope (1, Grace Hopper boards) and every other field
 * get NVML_ERROR_NOT_SUPPORTED in their own nvmlReturn, as on a GPU without
 * them; the call itself succeeds. */
typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;   /* µs since the epoch */
    long long latencyUsec;
    int valueType;         /* NVML_VALUE_TYPE_UNSIGNED_INT = 1 */
    nvmlReturn_t nvmlReturn;
    union {
        double dVal;
        unsigned int uiVal;
        unsigned long ulVal;
        unsigned long long ullVal;
        long long sllVal;
        int siVal;
    } value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_POWER_AVERAGE 185
#define NVML_FI_DEV_POWER_INSTANT 186
#define NVML_FI_DEV_POWER_MIN_LIMIT 187
#define NVML_FI_DEV_POWER_MAX_LIMIT 188
#define NVML_FI_DEV_POWER_DEFAULT_LIMIT 189
#define NVML_FI_DEV_POWER_CURRENT_LIMIT 190
#define NVML_FI_DEV_POWER_REQUESTED_LIMIT 192
#define POWER_DRAW_MW 75000u

static int power_field(unsigned int id, unsigned int *mw)
{
    switch (id) {
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT: *mw = POWER_DRAW_MW; return 1;
    case NVML_FI_DEV_POWER_MIN_LIMIT: *mw = POWER_MIN_MW; return 1;
    case NVML_FI_DEV_POWER_MAX_LIMIT:
    case NVML_FI_DEV_POWER_DEFAULT_LIMIT:
    case NVML_FI_DEV_POWER_CURRENT_LIMIT:
    case NVML_FI_DEV_POWER_REQUESTED_LIMIT: *mw = POWER_LIMIT_MW; return 1;
    default: return 0;
    }
}

SIM_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    NEED_DEV(device, i);
    if (valuesCount < 0 || (valuesCount && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int k = 0; k < valuesCount; k++) {
        nvmlFieldValue_t *v = &values[k];
        unsigned int mw;
        v->timestamp = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        if (v->scopeId == 0 && power_field(v->fieldId, &mw)) {
            v->valueType = 1;
            v->value.uiVal = mw;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
