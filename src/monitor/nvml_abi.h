/* The part of NVML's C interface that gradus::monitor calls, declared here so that building gradus
 * needs no NVIDIA headers: the library itself is loaded at run time (nvml.cpp). Every type,
 * constant and signature below mirrors nvml.h (NVML API version 11/12, drivers r450 and later);
 * they are part of NVML's stable ABI, which NVIDIA keeps across driver versions. C-compatible, so
 * that the test suite's fake libnvidia-ml (tests/monitor/fake_nvml.c) implements the same
 * declarations. */
#ifndef GRADUS_MONITOR_NVML_ABI_H
#define GRADUS_MONITOR_NVML_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int nvmlReturn_t; /* an enum in nvml.h; int-sized */
typedef struct nvmlDevice_st* nvmlDevice_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
};

typedef struct nvmlUtilization_st {
  unsigned int gpu;    /* % of the last sample period in which a kernel ran */
  unsigned int memory; /* % of it in which device memory was read or written */
} nvmlUtilization_t;

typedef struct nvmlMemory_st {
  unsigned long long total; /* bytes */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef int nvmlTemperatureSensors_t;
enum { NVML_TEMPERATURE_GPU = 0 };

typedef int nvmlClockType_t;
enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };

typedef int nvmlPcieUtilCounter_t;
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };

/* Bits of nvmlDeviceGetCurrentClocksEventReasons (called ...ThrottleReasons before r535). */
#define nvmlClocksThrottleReasonGpuIdle 0x1ULL
#define nvmlClocksThrottleReasonApplicationsClocksSetting 0x2ULL
#define nvmlClocksThrottleReasonSwPowerCap 0x4ULL
#define nvmlClocksThrottleReasonHwSlowdown 0x8ULL
#define nvmlClocksThrottleReasonSyncBoost 0x10ULL
#define nvmlClocksThrottleReasonSwThermalSlowdown 0x20ULL
#define nvmlClocksThrottleReasonHwThermalSlowdown 0x40ULL
#define nvmlClocksThrottleReasonHwPowerBrakeSlowdown 0x80ULL
#define nvmlClocksThrottleReasonDisplayClockSetting 0x100ULL

#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

/* The functions, as typedefs for dlsym (the fake library defines functions of these types). */
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char* version, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int* count);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int index, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t device, char* name, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t device,
                                                         nvmlUtilization_t* utilization);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t device, nvmlMemory_t* memory);
/* milliwatts */
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t device, unsigned int* power);
typedef nvmlReturn_t (*nvmlDeviceGetEnforcedPowerLimit_fn)(nvmlDevice_t device,
                                                           unsigned int* limit);
/* degrees C */
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t device,
                                                    nvmlTemperatureSensors_t sensor,
                                                    unsigned int* temp);
/* MHz */
typedef nvmlReturn_t (*nvmlDeviceGetClockInfo_fn)(nvmlDevice_t device, nvmlClockType_t type,
                                                  unsigned int* clock);
typedef nvmlReturn_t (*nvmlDeviceGetCurrentClocksEventReasons_fn)(nvmlDevice_t device,
                                                                  unsigned long long* reasons);
/* KB/s over a 20 ms window */
typedef nvmlReturn_t (*nvmlDeviceGetPcieThroughput_fn)(nvmlDevice_t device,
                                                       nvmlPcieUtilCounter_t counter,
                                                       unsigned int* value);
/* millijoules since the driver was last loaded (Volta and newer) */
typedef nvmlReturn_t (*nvmlDeviceGetTotalEnergyConsumption_fn)(nvmlDevice_t device,
                                                               unsigned long long* energy);

#ifdef __cplusplus
}
#endif

#endif /* GRADUS_MONITOR_NVML_ABI_H */
