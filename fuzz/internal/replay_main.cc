// main() for fuzz targets in builds without libFuzzer (every configuration
// but --config=asan, see fuzz/fuzz.bzl): runs each file named on the
// command line, or found in a folder named there, through
// LLVMFuzzerTestOneInput once, so the seed corpora are regression tests
// wherever the suite runs. Arguments starting with '-' (libFuzzer's flags)
// are ignored. Exits 1 when no input was found.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

namespace {

// Appends `path`, or the regular files directly inside it, to `inputs`.
void Collect(const std::string& path, std::vector<std::string>* inputs) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return;
  if (!S_ISDIR(info.st_mode)) {
    inputs->push_back(path);
    return;
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> found;
  while (dirent* entry = readdir(dir)) {
    std::string child = path + "/" + entry->d_name;
    if (entry->d_name[0] != '.' && stat(child.c_str(), &info) == 0 &&
        S_ISREG(info.st_mode)) {
      found.push_back(child);
    }
  }
  closedir(dir);
  std::sort(found.begin(), found.end());
  inputs->insert(inputs->end(), found.begin(), found.end());
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') Collect(argv[i], &inputs);
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER... (no inputs found)\n",
                 argv[0]);
    return 1;
  }
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
