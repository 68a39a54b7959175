// Helpers for the monitor tests: a scratch directory for fake /proc and sysfs trees, and the
// fake NVML's environment variables, cleared around every test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace gradus::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gradus_monitor_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to path()/relative, creating the directories on the way.
  void write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path file = path_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }

 private:
  std::filesystem::path path_;
};

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name :
         {"FAKE_NVML_INIT_RC", "FAKE_NVML_DEVICES", "FAKE_NVML_UNSUPPORTED", "FAKE_NVML_POWER_MW",
          "FAKE_NVML_ENERGY_STEP_MJ", "GRADUS_NVML_LIBRARY"}) {
      ::unsetenv(name);
    }
  }
};

}  // namespace gradus::testing
