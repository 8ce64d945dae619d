#include "cudnn/descriptor.h"

#include <atomic>

#include "cudnn/check.h"

namespace convplan::cudnn_detail {
namespace {
std::atomic<int64_t> g_live_descriptors{0};
}  // namespace

int64_t live_descriptor_count() { return g_live_descriptors.load(std::memory_order_relaxed); }

StatusOr<BackendDescriptor> BackendDescriptor::create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t desc = nullptr;
  CONVPLAN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc));
  g_live_descriptors.fetch_add(1, std::memory_order_relaxed);
  return BackendDescriptor(desc, type);
}

StatusOr<std::vector<BackendDescriptor>> BackendDescriptor::create_many(
    cudnnBackendDescriptorType_t type, int64_t count) {
  std::vector<BackendDescriptor> out;
  out.reserve(static_cast<size_t>(count > 0 ? count : 0));
  for (int64_t i = 0; i < count; ++i) {
    CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor d, create(type));  // `out` frees the others
    out.push_back(std::move(d));
  }
  return out;
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : desc_(other.desc_), type_(other.type_) {
  other.desc_ = nullptr;
}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    desc_ = other.desc_;
    type_ = other.type_;
    other.desc_ = nullptr;
  }
  return *this;
}

void BackendDescriptor::reset() noexcept {
  if (desc_ != nullptr) {
    (void)cudnnBackendDestroyDescriptor(desc_);
    g_live_descriptors.fetch_sub(1, std::memory_order_relaxed);
    desc_ = nullptr;
  }
}

cudnnStatus_t BackendDescriptor::set(cudnnBackendAttributeName_t name,
                                     cudnnBackendAttributeType_t type, int64_t count,
                                     const void* values) const {
  return cudnnBackendSetAttribute(desc_, name, type, count, values);
}

cudnnStatus_t BackendDescriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) const {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

cudnnStatus_t BackendDescriptor::set_int64s(cudnnBackendAttributeName_t name,
                                            std::span<const int64_t> values) const {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

cudnnStatus_t BackendDescriptor::set_descriptor(cudnnBackendAttributeName_t name,
                                                const BackendDescriptor& value) const {
  cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

cudnnStatus_t BackendDescriptor::set_descriptors(
    cudnnBackendAttributeName_t name, std::span<const cudnnBackendDescriptor_t> values) const {
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(values.size()),
             values.data());
}

cudnnStatus_t BackendDescriptor::get(cudnnBackendAttributeName_t name,
                                     cudnnBackendAttributeType_t type, int64_t requested,
                                     int64_t* count, void* values) const {
  return cudnnBackendGetAttribute(desc_, name, type, requested, count, values);
}

cudnnStatus_t BackendDescriptor::get_int64(cudnnBackendAttributeName_t name, int64_t* value) const {
  int64_t count = 0;
  return get(name, CUDNN_TYPE_INT64, 1, &count, value);
}

cudnnStatus_t BackendDescriptor::get_count(cudnnBackendAttributeName_t name,
                                           cudnnBackendAttributeType_t type, int64_t* count) const {
  *count = 0;
  return get(name, type, 0, count, nullptr);
}

cudnnStatus_t BackendDescriptor::get_descriptors(cudnnBackendAttributeName_t name,
                                                 std::vector<BackendDescriptor>& out,
                                                 int64_t* count) const {
  std::vector<cudnnBackendDescriptor_t> raw;
  raw.reserve(out.size());
  for (const BackendDescriptor& d : out) raw.push_back(d.get());
  *count = 0;
  return get(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), count,
             raw.data());
}

cudnnStatus_t BackendDescriptor::finalize() const { return cudnnBackendFinalize(desc_); }

}  // namespace convplan::cudnn_detail
