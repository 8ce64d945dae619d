// BackendDescriptor: move-only ownership of one cuDNN backend descriptor
// (cudnnBackendCreateDescriptor / cudnnBackendDestroyDescriptor).
//
// The attribute methods return cuDNN's raw status so that each call site wraps them in
// CONVPLAN_CUDNN_CHECK, whose message then shows the attribute that failed, e.g.
//   CONVPLAN_CUDNN_CHECK(x.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims));
// A descriptor is used by one thread at a time. Internal to src/cudnn.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <span>
#include <vector>

#include "convplan/status.h"

namespace convplan::cudnn_detail {

class BackendDescriptor {
 public:
  BackendDescriptor() = default;  // holds nothing
  // A new descriptor of `type`; kCudnnError/kOutOfMemory (nothing allocated) on failure.
  static StatusOr<BackendDescriptor> create(cudnnBackendDescriptorType_t type);
  // `count` new descriptors of `type`; on failure the ones already made are destroyed.
  static StatusOr<std::vector<BackendDescriptor>> create_many(cudnnBackendDescriptorType_t type,
                                                              int64_t count);

  BackendDescriptor(BackendDescriptor&& other) noexcept;
  // Destroys what this held first, then takes other's descriptor.
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  ~BackendDescriptor() { reset(); }

  // Destroys the descriptor (never throws; a failed destroy is ignored), leaving this empty.
  void reset() noexcept;
  cudnnBackendDescriptor_t get() const { return desc_; }
  cudnnBackendDescriptorType_t type() const { return type_; }
  explicit operator bool() const { return desc_ != nullptr; }

  cudnnStatus_t set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                    int64_t count, const void* values) const;
  cudnnStatus_t set_int64(cudnnBackendAttributeName_t name, int64_t value) const;
  cudnnStatus_t set_int64s(cudnnBackendAttributeName_t name, std::span<const int64_t> values) const;
  cudnnStatus_t set_descriptor(cudnnBackendAttributeName_t name,
                               const BackendDescriptor& value) const;
  cudnnStatus_t set_descriptors(cudnnBackendAttributeName_t name,
                                std::span<const cudnnBackendDescriptor_t> values) const;

  cudnnStatus_t get(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                    int64_t requested, int64_t* count, void* values) const;
  cudnnStatus_t get_int64(cudnnBackendAttributeName_t name, int64_t* value) const;
  // How many elements an array attribute holds (asks for none).
  cudnnStatus_t get_count(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          int64_t* count) const;
  // Fills `out` (descriptors the caller created, of the attribute's element type); `count` gets
  // the number written.
  cudnnStatus_t get_descriptors(cudnnBackendAttributeName_t name,
                                std::vector<BackendDescriptor>& out, int64_t* count) const;

  cudnnStatus_t finalize() const;

 private:
  BackendDescriptor(cudnnBackendDescriptor_t desc, cudnnBackendDescriptorType_t type)
      : desc_(desc), type_(type) {}
  cudnnBackendDescriptor_t desc_ = nullptr;
  cudnnBackendDescriptorType_t type_ = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;
};

// Descriptors created by BackendDescriptor and not yet destroyed, in this process; for tests of
// the ownership rules.
int64_t live_descriptor_count();

}  // namespace convplan::cudnn_detail
