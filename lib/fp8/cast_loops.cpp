#include "fp8/cast_loops.h"

namespace fpg {
namespace fp8 {

const DecodeTable& decode_table(Format f) {
  static const DecodeTable e4m3(Format::e4m3), e5m2(Format::e5m2);
  return f == Format::e4m3 ? e4m3 : e5m2;
}

}  // namespace fp8
}  // namespace fpg
