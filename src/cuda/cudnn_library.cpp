// Opening cuDNN at run time (cudnn_library.hpp).
#include "cudnn_library.hpp"

#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

namespace flashbench::cuda {

namespace {

// The sub-libraries cuDNN 9 opens by name from libcudnn.so.9; opened first (globally) from the
// folder of an explicitly named library, the loader then finds them already there.
constexpr std::array<const char*, 7> kSiblings = {
    "libcudnn_graph.so.9",     "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
    "libcudnn_heuristic.so.9", "libcudnn_ops.so.9",                 "libcudnn_cnn.so.9",
    "libcudnn_adv.so.9"};

std::string dl_error() {
  const char* message = dlerror();
  return message ? message : "unknown dlopen error";
}

template <class Function>
bool bind(void* handle, const char* name, Function& function, std::string& why_not) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
  if (!function) why_not = fmt::format("the cuDNN library has no {} ({})", name, dl_error());
  return function != nullptr;
}

// Opens and binds the library; the handle stays open for the life of the process (cuDNN's handles
// and plans live in it).
std::unique_ptr<CudnnLibrary> open_library(std::string& why_not) {
  std::string path = "libcudnn.so.9";
  if (const char* named = std::getenv("FLASHBENCH_CUDNN_LIBRARY"); named && *named) {
    path = named;
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    for (const char* sibling : kSiblings) {
      const std::filesystem::path candidate = folder / sibling;
      std::error_code ignored;
      if (std::filesystem::exists(candidate, ignored)) dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
    }
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    why_not = fmt::format("cuDNN 9 could not be loaded ({}); set FLASHBENCH_CUDNN_LIBRARY to the path of "
                          "libcudnn.so.9",
                          dl_error());
    return nullptr;
  }
  auto library = std::make_unique<CudnnLibrary>();
  library->path = path;
  decltype(&cudnnGetVersion) get_version = nullptr;
  if (!bind(handle, "cudnnGetVersion", get_version, why_not) ||
      !bind(handle, "cudnnGetErrorString", library->error_string, why_not) ||
      !bind(handle, "cudnnGetLastErrorString", library->last_error, why_not) ||
      !bind(handle, "cudnnCreate", library->create, why_not) ||
      !bind(handle, "cudnnDestroy", library->destroy, why_not) ||
      !bind(handle, "cudnnSetStream", library->set_stream, why_not) ||
      !bind(handle, "cudnnBackendCreateDescriptor", library->create_descriptor, why_not) ||
      !bind(handle, "cudnnBackendDestroyDescriptor", library->destroy_descriptor, why_not) ||
      !bind(handle, "cudnnBackendSetAttribute", library->set_attribute, why_not) ||
      !bind(handle, "cudnnBackendGetAttribute", library->get_attribute, why_not) ||
      !bind(handle, "cudnnBackendFinalize", library->finalize, why_not) ||
      !bind(handle, "cudnnBackendExecute", library->execute, why_not))
    return nullptr;
  library->version = get_version();
  if (library->version < kMinCudnnVersion) {
    why_not = fmt::format("{} is cuDNN {}, flashbench needs 9.0 or later", path, library->version);
    return nullptr;
  }
  return library;
}

}  // namespace

std::string CudnnLibrary::describe(cudnnStatus_t status) const {
  std::array<char, 1024> message{};
  last_error(message.data(), message.size());
  std::string text = error_string(status);
  if (message[0] != '\0') text += fmt::format(": {}", message.data());
  return text;
}

const CudnnLibrary* cudnn_library(std::string& why_not) {
  static std::once_flag once;
  static std::unique_ptr<CudnnLibrary> library;
  static std::string failure;
  std::call_once(once, [] { library = open_library(failure); });
  if (!library) why_not = failure;
  return library.get();
}

}  // namespace flashbench::cuda
