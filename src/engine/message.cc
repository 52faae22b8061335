#include "engine/message.h"

#include <cstring>
#include <sstream>

#include "common/error.h"

namespace ringfold::engine {

const char* opTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kJoin: return "JOIN";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kBarrier: return "BARRIER";
    case OpType::kReducescatter: return "REDUCESCATTER";
    case OpType::kReduce: return "REDUCE";
    case OpType::kAddProcessSet: return "ADD_PROCESS_SET";
    case OpType::kRemoveProcessSet: return "REMOVE_PROCESS_SET";
    case OpType::kCancel: return "CANCEL";
  }
  return "UNKNOWN";
}

const char* opTypeLowerName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kJoin: return "join";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kBarrier: return "barrier";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kReduce: return "reduce";
    case OpType::kAddProcessSet: return "add_process_set";
    case OpType::kRemoveProcessSet: return "remove_process_set";
    case OpType::kCancel: return "cancel";
  }
  return "unknown";
}

int64_t Request::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

namespace {

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void putString(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void putInts(const std::vector<int64_t>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) put<int64_t>(x);
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T get() {
    need(sizeof(T), "a field");
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string getString(size_t maxBytes) {
    uint32_t n = get<uint32_t>();
    if (n > maxBytes) RF_THROW(InvalidArgument, "negotiation message: a string of ", n, " bytes exceeds the limit of ", maxBytes);
    need(n, "a string");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> getInts() {
    uint32_t n = get<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(int64_t), "an integer array");
    std::vector<int64_t> v(n);
    for (auto& x : v) x = get<int64_t>();
    return v;
  }
  uint32_t getCount(size_t minBytesEach) {
    uint32_t n = get<uint32_t>();
    need(static_cast<size_t>(n) * minBytesEach, "a list");
    return n;
  }
  void finish() const {
    if (pos_ != size_) RF_THROW(InvalidArgument, "negotiation message: ", size_ - pos_, " trailing bytes");
  }

 private:
  void need(size_t n, const char* what) const {
    if (n > size_ - pos_) {
      RF_THROW(InvalidArgument, "negotiation message truncated: ", what, " needs ", n,
               " bytes but only ", size_ - pos_, " remain");
    }
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr uint32_t kRequestMagic = 0x52465251;   // "RFRQ"
constexpr uint32_t kResponseMagic = 0x52465253;  // "RFRS"

template <typename E>
E checkedEnum(uint8_t raw, int limit, const char* what) {
  if (raw >= limit) RF_THROW(InvalidArgument, "negotiation message: bad ", what, " ", int{raw});
  return static_cast<E>(raw);
}

// The attributes the ranks must agree on (dtype, reduce op, root, device, scale factors), in the
// same order in requests and responses.
template <typename Message>
void putAttributes(Writer& w, const Message& r) {
  w.put(static_cast<uint8_t>(r.dtype));
  w.put(static_cast<uint8_t>(r.reduceOp));
  w.put(r.root);
  w.put(r.device);
  w.put(r.preScale);
  w.put(r.postScale);
}

template <typename Message>
void getAttributes(Reader& rd, Message& r) {
  r.dtype = checkedEnum<DataType>(rd.get<uint8_t>(), kNumDataTypes, "dtype");
  r.reduceOp = checkedEnum<ReduceOp>(rd.get<uint8_t>(), kNumReduceOps, "reduce op");
  r.root = rd.get<int32_t>();
  r.device = rd.get<int32_t>();
  r.preScale = rd.get<double>();
  r.postScale = rd.get<double>();
}

}  // namespace

std::vector<uint8_t> encode(const RequestList& list) {
  Writer w;
  w.put(kRequestMagic);
  w.put<uint32_t>(static_cast<uint32_t>(list.requests.size()));
  for (const Request& r : list.requests) {
    w.put(r.rank);
    w.put(static_cast<uint8_t>(r.op));
    putAttributes(w, r);
    w.putString(r.name);
    w.putInts(r.shape);
    w.putInts(r.splits);
    w.putString(r.group);
    w.put(r.groupSize);
  }
  return w.take();
}

RequestList decodeRequests(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  if (rd.get<uint32_t>() != kRequestMagic) RF_THROW(InvalidArgument, "not a negotiation request list");
  RequestList list;
  uint32_t n = rd.getCount(40);
  list.requests.resize(n);
  for (Request& r : list.requests) {
    r.rank = rd.get<int32_t>();
    r.op = static_cast<OpType>(rd.get<uint8_t>());
    getAttributes(rd, r);
    r.name = rd.getString(kMaxNameBytes);
    r.shape = rd.getInts();
    r.splits = rd.getInts();
    r.group = rd.getString(kMaxNameBytes);
    r.groupSize = rd.get<int32_t>();
  }
  rd.finish();
  return list;
}

std::vector<uint8_t> encode(const ResponseList& list) {
  Writer w;
  w.put(kResponseMagic);
  w.put<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const Response& r : list.responses) {
    w.put(static_cast<uint8_t>(r.op));
    w.put<uint8_t>(r.error ? 1 : 0);
    w.putString(r.errorMessage);
    w.putString(r.name);
    putAttributes(w, r);
    w.put(r.elements);
    w.putInts(r.firstDims);
    w.putInts(r.shape);
    w.putString(r.group);
    w.put(r.lastJoinedRank);
  }
  return w.take();
}

ResponseList decodeResponses(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  if (rd.get<uint32_t>() != kResponseMagic) RF_THROW(InvalidArgument, "not a negotiation response list");
  ResponseList list;
  uint32_t n = rd.getCount(40);
  list.responses.resize(n);
  for (Response& r : list.responses) {
    r.op = static_cast<OpType>(rd.get<uint8_t>());
    r.error = rd.get<uint8_t>() != 0;
    r.errorMessage = rd.getString(1 << 20);
    r.name = rd.getString(kMaxNameBytes);
    getAttributes(rd, r);
    r.elements = rd.get<int64_t>();
    r.firstDims = rd.getInts();
    r.shape = rd.getInts();
    r.group = rd.getString(kMaxNameBytes);
    r.lastJoinedRank = rd.get<int32_t>();
  }
  rd.finish();
  return list;
}

}  // namespace ringfold::engine
