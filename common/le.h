// Little-endian integers in byte strings, as the dataset format and its extended-attribute
// lists store them (whatever the host's order).
#pragma once

#include <cstdint>
#include <string>

namespace fanstore::le {

inline void Put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; i++) s.push_back(static_cast<char>(v >> (8 * i)));
}
inline void Put64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; i++) s.push_back(static_cast<char>(v >> (8 * i)));
}
inline uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace fanstore::le
