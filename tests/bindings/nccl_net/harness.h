// Test harness of the NCCL net plugin: the plugin dlopened as NCCL does, each ncclNetPlugin_vN
// table behind one version-neutral Api, and two forked processes per scenario with pipes
// between them (the listen handle goes from receiver to sender as NCCL's bootstrap would carry
// it). Each role returns "" or what went wrong; a role that overruns its deadline is killed and
// reported. Roles must not use gtest assertions (they run in children).
#pragma once

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bindings/nccl_net/net_api.h"

namespace ncclnet_test {

using namespace ringfold::ncclnet;
using Clock = std::chrono::steady_clock;

inline void* pluginLibrary() {
  static void* lib = dlopen(NCCL_NET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  return lib;
}

inline void quietLogger(LogLevel, unsigned long, const char*, int, const char*, ...) {}

// The properties every version reports, in one shape.
struct Props {
  std::string name;
  bool hasPciPath = false;
  uint64_t guid = 0;
  int ptrSupport = 0, regIsGlobal = 0, speed = 0, maxComms = 0, maxRecvs = 0, deviceType = -1, deviceVersion = -1;
  size_t maxP2pBytes = 0;        // v9+
  int vDevices = -1;             // v9+
  int maxMultiRequestSize = -1;  // v11+
  int railId = 0, planeId = 0;   // v12
};

// One version's table, called the same way whatever the version.
struct Api {
  int version = 0;
  const char* name = nullptr;
  std::function<Result()> init;
  std::function<Result(int*)> devices;
  std::function<Result(int, Props*)> properties;
  std::function<Result(int, void*, void**)> listen;
  std::function<Result(int, void*, void**)> connect;
  std::function<Result(void*, void**)> accept;
  std::function<Result(void*, void*, size_t, int, void**)> regMr;
  std::function<Result(void*, void*, size_t, int, uint64_t, int, void**)> regMrDmaBuf;
  std::function<Result(void*, void*)> deregMr;
  std::function<Result(void*, void*, size_t, int, void*, void**)> isend;
  std::function<Result(void*, int, void**, size_t*, int*, void**, void**)> irecv;
  std::function<Result(void*, int, void**, int*, void**, void**)> iflush;
  std::function<Result(void*, int*, int*)> test;
  std::function<Result(void*)> closeSend, closeRecv, closeListen;
  std::function<Result()> finalize;  // v11+: of the context init made
  bool nullExtensions = false;       // getDeviceMr, irecvConsumed (and makeVDevice, setNetAttr) null
};

template <class T, class P>
void commonEntries(Api& a, T* t) {
  a.name = t->name;
  a.devices = t->devices;
  a.properties = [t](int dev, Props* out) {
    P p;
    std::memset(&p, 0x5a, sizeof(p));
    Result r = t->getProperties(dev, &p);
    if (r != kSuccess) return r;
    out->name = p.name ? p.name : "";
    out->hasPciPath = p.pciPath != nullptr;
    out->guid = p.guid;
    out->ptrSupport = p.ptrSupport;
    out->regIsGlobal = p.regIsGlobal;
    out->speed = p.speed;
    out->maxComms = p.maxComms;
    out->maxRecvs = p.maxRecvs;
    out->deviceType = p.netDeviceType;
    out->deviceVersion = p.netDeviceVersion;
    if constexpr (requires { p.maxP2pBytes; }) {
      out->maxP2pBytes = p.maxP2pBytes;
      out->vDevices = p.vProps.count;
    }
    if constexpr (requires { p.maxMultiRequestSize; }) out->maxMultiRequestSize = p.maxMultiRequestSize;
    if constexpr (requires { p.railId; }) {
      out->railId = p.railId;
      out->planeId = p.planeId;
    }
    return kSuccess;
  };
  a.accept = [t](void* l, void** c) { return t->accept(l, c, nullptr); };
  a.regMr = t->regMr;
  a.regMrDmaBuf = t->regMrDmaBuf;
  a.deregMr = t->deregMr;
  a.iflush = t->iflush;
  a.test = t->test;
  a.closeSend = t->closeSend;
  a.closeRecv = t->closeRecv;
  a.closeListen = t->closeListen;
  a.nullExtensions = t->getDeviceMr == nullptr && t->irecvConsumed == nullptr;
}

// The Api of ncclNetPlugin_v<version>; name null when the symbol is missing.
inline Api loadApi(int version) {
  Api a;
  a.version = version;
  void* lib = pluginLibrary();
  if (lib == nullptr) return a;
  std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  void* table = dlsym(lib, sym.c_str());
  if (table == nullptr) return a;
  if (version == 8) {
    auto* t = static_cast<NetV8*>(table);
    commonEntries<NetV8, PropertiesV8>(a, t);
    a.init = [t] { return t->init(quietLogger); };
    a.listen = t->listen;
    a.connect = [t](int d, void* h, void** c) { return t->connect(d, h, c, nullptr); };
    a.isend = [t](void* c, void* d, size_t n, int tag, void* m, void** r) {
      return t->isend(c, d, static_cast<int>(n), tag, m, r);
    };
    a.irecv = [t](void* c, int n, void** d, size_t* s, int* tags, void** m, void** r) {
      int narrow[16];
      for (int i = 0; i < n && i < 16; ++i) narrow[i] = static_cast<int>(s[i]);
      return t->irecv(c, n, d, narrow, tags, m, r);
    };
  } else if (version == 9) {
    auto* t = static_cast<NetV9*>(table);
    commonEntries<NetV9, PropertiesV9>(a, t);
    a.nullExtensions = a.nullExtensions && t->makeVDevice == nullptr;
    a.init = [t] { return t->init(quietLogger); };
    a.listen = t->listen;
    a.connect = [t](int d, void* h, void** c) { return t->connect(d, h, c, nullptr); };
    a.isend = t->isend;
    a.irecv = t->irecv;
  } else if (version == 10) {
    auto* t = static_cast<NetV10*>(table);
    commonEntries<NetV10, PropertiesV10>(a, t);
    a.nullExtensions = a.nullExtensions && t->makeVDevice == nullptr;
    a.init = [t] { return t->init(quietLogger, nullptr); };
    a.listen = t->listen;
    a.connect = [t](int d, void* h, void** c) {
      CommConfig config{kTrafficClassUndefined};
      return t->connect(d, &config, h, c, nullptr);
    };
    a.isend = [t](void* c, void* d, size_t n, int tag, void* m, void** r) {
      return t->isend(c, d, n, tag, m, nullptr, r);
    };
    a.irecv = [t](void* c, int n, void** d, size_t* s, int* tags, void** m, void** r) {
      return t->irecv(c, n, d, s, tags, m, nullptr, r);
    };
  } else {
    auto wire = [&a](auto* t, auto* propsTag) {
      using T = std::remove_pointer_t<decltype(t)>;
      using P = std::remove_pointer_t<decltype(propsTag)>;
      commonEntries<T, P>(a, t);
      a.nullExtensions = a.nullExtensions && t->makeVDevice == nullptr && t->setNetAttr == nullptr;
      auto ctx = std::make_shared<void*>(nullptr);  // init's context, for listen/connect/finalize
      a.init = [t, ctx] {
        CommConfig config{kTrafficClassUndefined};
        return t->init(ctx.get(), 42, &config, quietLogger, nullptr);
      };
      a.finalize = [t, ctx] { return t->finalize(*ctx); };
      a.listen = [t, ctx](int d, void* h, void** l) { return t->listen(*ctx, d, h, l); };
      a.connect = [t, ctx](int d, void* h, void** c) { return t->connect(*ctx, d, h, c, nullptr); };
      a.isend = [t](void* c, void* d, size_t n, int tag, void* m, void** r) {
        return t->isend(c, d, n, tag, m, nullptr, r);
      };
      a.irecv = [t](void* c, int n, void** d, size_t* s, int* tags, void** m, void** r) {
        return t->irecv(c, n, d, s, tags, m, nullptr, r);
      };
    };
    if (version == 11) {
      wire(static_cast<NetV11*>(table), static_cast<PropertiesV11*>(nullptr));
    } else {
      wire(static_cast<NetV12*>(table), static_cast<PropertiesV12*>(nullptr));
    }
  }
  return a;
}

// A pipe, both ends.
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (pipe(fds) == 0) {
      r = fds[0];
      w = fds[1];
    }
  }
  bool send(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t k = write(w, c, n);
      if (k <= 0) return false;
      c += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  // Reads n bytes within `timeout`; false on EOF, error or timeout.
  bool recv(void* p, size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    char* c = static_cast<char*>(p);
    const auto deadline = Clock::now() + timeout;
    while (n > 0) {
      int left =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) return false;
      pollfd pf{r, POLLIN, 0};
      if (::poll(&pf, 1, left) <= 0) continue;
      ssize_t k = read(r, c, n);
      if (k <= 0) return false;
      c += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
};

// Printf into a std::string.
inline std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

// Runs each role in its own forked process; returns, per role, "" or what went wrong (the
// role's text, its signal, or "timed out" after `deadline`, when it is killed).
inline std::vector<std::string> runProcesses(const std::vector<std::function<std::string()>>& roles,
                                             std::chrono::milliseconds deadline) {
  struct Child {
    pid_t pid;
    int out;
    std::string text;
    bool done = false;
    int status = 0;
  };
  std::vector<Child> kids;
  for (const auto& role : roles) {
    int fds[2];
    if (pipe(fds) != 0) return {"pipe failed"};
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string r;
      try {
        r = role();
      } catch (const std::exception& e) {
        r = std::string("exception: ") + e.what();
      }
      if (!r.empty()) {
        ssize_t ignored = write(fds[1], r.data(), r.size());
        (void)ignored;
      }
      _exit(r.empty() ? 0 : 1);
    }
    close(fds[1]);
    kids.push_back({pid, fds[0], ""});
  }
  const auto end = Clock::now() + deadline;
  size_t left = kids.size();
  while (left > 0 && Clock::now() < end) {
    for (Child& k : kids) {
      if (k.done) continue;
      if (waitpid(k.pid, &k.status, WNOHANG) == k.pid) {
        k.done = true;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::string> out;
  for (Child& k : kids) {
    std::string text;
    if (!k.done) {
      kill(k.pid, SIGKILL);
      waitpid(k.pid, &k.status, 0);
      text = "timed out (killed)";
    } else {
      char buf[4096];
      ssize_t n;
      while ((n = read(k.out, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
      if (text.empty() && WIFSIGNALED(k.status)) text = fmt("killed by signal %d", WTERMSIG(k.status));
      if (text.empty() && WIFEXITED(k.status) && WEXITSTATUS(k.status) != 0) text = "failed";
    }
    close(k.out);
    out.push_back(text);
  }
  return out;
}

}  // namespace ncclnet_test
