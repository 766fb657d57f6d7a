#include "cluster/view.h"

namespace segstore::cluster {

ViewBoard::ViewBoard() {
  auto v = std::make_shared<ClusterView>();
  v->map.cluster = true;
  view_ = std::move(v);
}

void ViewBoard::Publish(std::shared_ptr<const ClusterView> view) {
  std::lock_guard lock(mu_);
  view_ = std::move(view);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::shared_ptr<const ClusterView> ViewBoard::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

}  // namespace segstore::cluster
