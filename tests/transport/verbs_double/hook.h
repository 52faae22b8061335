// The verbs double's test hook (entry_points.cc), reached through the loaded libibverbs.so.1:
// every device this process has open loses its port now. Returns how many NICs went down, or -1
// when the loaded libibverbs.so.1 is not the double.
#pragma once

#include <dlfcn.h>

namespace ringfold::test {

inline int verbsDoublePortDown() {
  void* verbs = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
  auto* hook = verbs ? reinterpret_cast<int (*)()>(dlsym(verbs, "verbs_double_port_down")) : nullptr;
  const int n = hook ? hook() : -1;
  if (verbs) dlclose(verbs);
  return n;
}

}  // namespace ringfold::test
