// libFuzzer target for the NPY reader: any input must either parse or be rejected with
// npy::Error -- never crash, hang, leak or read out of bounds. What parses must survive a round
// trip through the writer unchanged.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace npy = a4w4::npy;
  npy::Array array;
  try {
    array = npy::parse(std::span<const uint8_t>(data, size));
  } catch (const npy::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  const std::vector<uint8_t> image = npy::encode(array);
  const npy::Array again = npy::parse(image);
  if (again.dtype != array.dtype || again.shape != array.shape || again.data != array.data)
    __builtin_trap();
  return 0;
}
