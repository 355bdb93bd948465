// A deterministic, bounded stand-in for libFuzzer's driver, so fuzz targets also run
// as ordinary tests under any compiler: every seed file given on the command line is
// run as is, then mutated (byte flips, deletions, duplications, insertions of IR
// punctuation and keywords, splices between seeds) for --iterations rounds with a
// fixed seed. A property violation aborts inside the target and fails the test.
// For coverage-guided fuzzing use the libFuzzer build (run_libfuzzer.sh).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

const char* const kTokens[] = {"%", "@", "(", ")", "{", "}", "[", "]", "<", ">", ",", "=", ":", "?", "\"", "\\",
                               "-", ".", "::", "none", "future<", "f32[", "strides[", "@cuda:", "magi::wait(",
                               "input %", "output ", "graph @", "module @", "process_group @", "1e308", "-inf",
                               "99999999999999999999", "\n", "//", "remat = ", "bucket = ", "\xff", "dtype(", "device("};

std::string Mutate(std::string input, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    size_t pos = input.empty() ? 0 : rng() % (input.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!input.empty()) input[rng() % input.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1:  // delete a range
        if (!input.empty()) input.erase(rng() % input.size(), 1 + rng() % 16);
        break;
      case 2:  // insert a token
        input.insert(pos, kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
        break;
      case 3: {  // duplicate a range
        if (input.empty()) break;
        size_t start = rng() % input.size();
        std::string piece = input.substr(start, 1 + rng() % 64);
        input.insert(pos, piece);
        break;
      }
      case 4: {  // splice with another seed
        const std::string& other = seeds[rng() % seeds.size()];
        if (other.empty()) break;
        size_t start = rng() % other.size();
        input = input.substr(0, pos) + other.substr(start);
        break;
      }
      default:  // truncate
        input.resize(pos);
    }
  }
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--iterations=", 0) == 0) {
      iterations = std::stol(arg.substr(13));
      continue;
    }
    std::ifstream file(arg, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "cannot read seed %s\n", arg.c_str());
      return 2;
    }
    std::stringstream contents;
    contents << file.rdbuf();
    seeds.push_back(contents.str());
  }
  if (seeds.empty()) seeds.push_back("");
  for (const std::string& seed : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
  std::mt19937_64 rng(0x6d616769);  // fixed: the test is reproducible
  for (long i = 0; i < iterations; ++i) {
    std::string input = Mutate(seeds[rng() % seeds.size()], seeds, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("ran %zu seeds and %ld mutations without a property violation\n", seeds.size(), iterations);
  return 0;
}
