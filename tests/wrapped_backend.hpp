#pragma once
// A backend under another name whose instances are wrapped in Instance (a planted fault): the
// tests of the pipeline's checks run a real backend with one thing broken.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"

namespace attn::testing {

template <class Instance>
class WrappedBackend final : public Backend {
 public:
  WrappedBackend(std::string name, std::string description, std::unique_ptr<Backend> inner)
      : name_(std::move(name)), description_(std::move(description)), inner_(std::move(inner)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  std::vector<std::string> features() const override { return {}; }
  Support available() const override { return inner_->available(); }
  Support supports(const AttentionSpec& spec, const Batch& batch) const override { return inner_->supports(spec, batch); }
  std::unique_ptr<BackendInstance> create(const Batch& batch, const CommonAttentionMetadata& m,
                                          const RunOptions& opts) const override {
    return std::make_unique<Instance>(inner_->create(batch, m, opts));
  }

 private:
  std::string name_, description_;
  std::unique_ptr<Backend> inner_;
};

// An instance that runs the inner one unchanged and passes its output through Adjust (a callable
// type, `void operator()(AttentionOutput&) const`) in fetch(): a fault or a declaration planted on
// the output alone.
template <class Adjust>
class FetchAdjustedInstance final : public BackendInstance {
 public:
  explicit FetchAdjustedInstance(std::unique_ptr<BackendInstance> inner) : inner_(std::move(inner)) {}
  void plan() override { inner_->plan(); }
  void run() override { inner_->run(); }
  void run_attention() override { inner_->run_attention(); }
  void poison() override { inner_->poison(); }
  void poison_outputs() override { inner_->poison_outputs(); }
  void synchronize() override { inner_->synchronize(); }
  AttentionOutput fetch() override {
    AttentionOutput o = inner_->fetch();
    Adjust{}(o);
    return o;
  }

 private:
  std::unique_ptr<BackendInstance> inner_;
};

}  // namespace attn::testing
