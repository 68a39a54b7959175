/* A stand-in for libnvidia-ml.so.1: the NVML functions gradus::monitor loads, returning canned
 * values, so the monitor's loader, fields and aggregates are tested on machines without a GPU.
 * Built twice (tests/CMakeLists.txt): complete, and with -DFAKE_NVML_MINIMAL, which leaves out
 * the energy counter, clock-event reasons and PCIe throughput (an old driver's library).
 *
 * Environment, read at each call so that a test can change it between monitors:
 *   FAKE_NVML_INIT_RC=n         nvmlInit_v2 returns n (e.g. 9, NVML_ERROR_DRIVER_NOT_LOADED)
 *   FAKE_NVML_DEVICES=n         number of GPUs (default 1, at most 8)
 *   FAKE_NVML_UNSUPPORTED=a,b   these readings return NVML_ERROR_NOT_SUPPORTED: util, memory,
 *                               power, power_limit, temperature, clock, clock_events, pcie, energy
 *   FAKE_NVML_POWER_MW=n        power of every GPU (default 150000 + 1000 * index)
 *   FAKE_NVML_ENERGY_STEP_MJ=n  the energy counter grows by n mJ per read (default 1000)
 * Device i reads: util 40 + 10i %, memory util 20 %, 80 GiB total, (10 + i) GiB used, limit
 * 300 W, 55 C, SM 1410 MHz, memory 1215 MHz, reasons idle + power-cap, PCIe tx 1000 / rx 2000
 * KB/s, energy counter starting at 5,000,000 mJ + i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/nvml_abi.h"

#define FAKE_MAX_DEVICES 8

struct nvmlDevice_st {
  unsigned int index;
  unsigned long long energy_mj;
};
static struct nvmlDevice_st devices[FAKE_MAX_DEVICES];

static int unsupported(const char* reading) {
  const char* list = getenv("FAKE_NVML_UNSUPPORTED");
  if (!list) return 0;
  const size_t n = strlen(reading);
  for (const char* p = list; (p = strstr(p, reading)) != NULL; p += n) {
    const int starts = p == list || p[-1] == ',';
    const int ends = p[n] == '\0' || p[n] == ',';
    if (starts && ends) return 1;
  }
  return 0;
}

static long env_long(const char* name, long fallback) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

static unsigned int device_count(void) {
  const long n = env_long("FAKE_NVML_DEVICES", 1);
  return n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (unsigned int)n;
}

nvmlReturn_t nvmlInit_v2(void) {
  const long rc = env_long("FAKE_NVML_INIT_RC", NVML_SUCCESS);
  if (rc != NVML_SUCCESS) return (nvmlReturn_t)rc;
  for (unsigned int i = 0; i < FAKE_MAX_DEVICES; ++i) {
    devices[i].index = i;
    devices[i].energy_mj = 5000000ULL + i;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  snprintf(version, length, "%s", "999.99.fake");
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = device_count();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  snprintf(name, length, "Fake GPU %u", device->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  if (unsupported("util")) return NVML_ERROR_NOT_SUPPORTED;
  u->gpu = 40 + 10 * device->index;
  u->memory = 20;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  if (unsupported("memory")) return NVML_ERROR_NOT_SUPPORTED;
  m->total = 80ULL << 30;
  m->used = (10ULL + device->index) << 30;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  if (unsupported("power")) return NVML_ERROR_NOT_SUPPORTED;
  *power = (unsigned int)env_long("FAKE_NVML_POWER_MW", 150000 + 1000 * (long)device->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  (void)device;
  if (unsupported("power_limit")) return NVML_ERROR_NOT_SUPPORTED;
  *limit = 300000;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  (void)device;
  if (unsupported("temperature") || sensor != NVML_TEMPERATURE_GPU) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *temp = 55;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  (void)device;
  if (unsupported("clock")) return NVML_ERROR_NOT_SUPPORTED;
  if (type == NVML_CLOCK_SM)
    *clock = 1410;
  else if (type == NVML_CLOCK_MEM)
    *clock = 1215;
  else
    return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_MINIMAL
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long* reasons) {
  (void)device;
  if (unsupported("clock_events")) return NVML_ERROR_NOT_SUPPORTED;
  *reasons = nvmlClocksThrottleReasonGpuIdle | nvmlClocksThrottleReasonSwPowerCap;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                         unsigned int* value) {
  (void)device;
  if (unsupported("pcie")) return NVML_ERROR_NOT_SUPPORTED;
  *value = counter == NVML_PCIE_UTIL_TX_BYTES ? 1000 : 2000;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  if (unsupported("energy")) return NVML_ERROR_NOT_SUPPORTED;
  *energy = device->energy_mj;
  device->energy_mj += (unsigned long long)env_long("FAKE_NVML_ENERGY_STEP_MJ", 1000);
  return NVML_SUCCESS;
}
#endif

/* The definitions above must have the types nvml.cpp looks them up as. */
static const nvmlInit_v2_fn check_init __attribute__((unused)) = nvmlInit_v2;
static const nvmlDeviceGetMemoryInfo_fn check_memory __attribute__((unused)) =
    nvmlDeviceGetMemoryInfo;
static const nvmlDeviceGetTemperature_fn check_temperature __attribute__((unused)) =
    nvmlDeviceGetTemperature;
static const nvmlDeviceGetClockInfo_fn check_clock __attribute__((unused)) = nvmlDeviceGetClockInfo;
