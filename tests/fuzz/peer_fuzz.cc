// libFuzzer target for what the peer service parses from unauthenticated bytes: request
// framing in every phase (wire::RequestSize, as the server's epoll loop calls it while a
// request arrives), the binding inside a credential, and the tag check of a keyed request.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "agent/peer_wire.h"

using namespace fanstore::agent::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (Phase p : {Phase::kHello, Phase::kAuth, Phase::kReady}) {
    // Byte by byte, as a slow client sends it: the size asked for never exceeds the limits.
    for (size_t n = 0; n <= size; n++) {
      auto need = RequestSize(p, in.substr(0, n));
      if (!need.ok() || *need == 0) break;
      if (*need > sizeof(Header) + kMaxCred + kTagLen) __builtin_trap();
      n = *need - 1 < n ? n : *need - 1;
    }
  }
  auto b = DecodeBinding(in);
  if (b.ok()) (void)CheckBinding(*b, *b);
  if (size >= sizeof(Header) + kTagLen) {
    Key k{};
    Mac m(k, false);
    Header h;
    std::memcpy(&h, data, sizeof h);
    Tag t;
    std::memcpy(t.data(), data + sizeof h, t.size());
    m.Begin(h);
    (void)m.Verify(t);
  }
  return 0;
}
