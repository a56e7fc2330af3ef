/* The simulated NVML (libnvidia-ml.so.1).  The status readings monitoring
 * tools show (nvidia-smi, gpustat, nvitop): power limits, performance state,
 * modes, encoder/decoder load, ECC counts.  A healthy, idle data-centre GPU.
 * The types are NVML's public ABI; cgpu_nvml.h declares only what cgpu uses. */
#include "nvml_sim.h"

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
