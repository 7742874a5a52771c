// In-memory trees (the dataset's `fanstore extract --erofs`, the doctor's probe, tests): put in
// canonical order and planned like root's tree files (image/erofs.h).
#include <sys/stat.h>

#include <algorithm>

#include "image/erofs.h"

namespace fanstore::image {
namespace {

// What the in-memory Plan reads: a vector of nodes in canonical order.
class VectorSource final : public NodeSource {
 public:
  VectorSource(std::vector<Node> nodes, std::vector<uint32_t> order)
      : nodes_(std::move(nodes)), order_(std::move(order)) {}
  uint64_t size() const override { return nodes_.size(); }
  std::unique_ptr<NodeCursor> Nodes() const override {
    class Cursor final : public NodeCursor {
     public:
      explicit Cursor(const std::vector<Node>& n) : n_(n) {}
      Result<const Node*> Next() override { return i_ < n_.size() ? &n_[i_++] : nullptr; }

     private:
      const std::vector<Node>& n_;
      size_t i_ = 0;
    };
    return std::make_unique<Cursor>(nodes_);
  }
  Status BlobOrder(const std::function<void(uint32_t)>& fn) const override {
    for (uint32_t x : order_) fn(x);
    return Status::OK();
  }

 private:
  std::vector<Node> nodes_;
  std::vector<uint32_t> order_;
};

}  // namespace

Result<std::vector<uint32_t>> Canonical(std::vector<Node>* nodes,
                                        std::vector<uint32_t>* blob_order) {
  const std::vector<Node>& in = *nodes;
  const size_t n = in.size();
  if (n == 0 || n >= kNone) return Status::InvalidArgument("no root, or too many names");
  if (!S_ISDIR(in[0].mode) || in[0].parent != 0 || in[0].link != kNone)
    return Status::InvalidArgument("node 0 is not a root directory");
  // Children by parent, sorted by name.
  std::vector<uint32_t> start(n + 1, 0), children(n - 1);
  for (uint32_t i = 1; i < n; i++) {
    const uint32_t p = in[i].parent;
    if (p >= n || p == i || !S_ISDIR(in[p].mode) || in[p].link != kNone)
      return Status::InvalidArgument("name " + std::to_string(i) +
                                     ": its parent is not a directory");
    start[p + 1]++;
  }
  for (size_t i = 1; i <= n; i++) start[i] += start[i - 1];
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (uint32_t i = 1; i < n; i++) children[fill[in[i].parent]++] = i;
  // Breadth first from the root: parent links that loop leave their nodes unreached.
  std::vector<uint32_t> order{0}, id(n, kNone);
  order.reserve(n);
  id[0] = 0;
  for (size_t k = 0; k < order.size(); k++) {
    const uint32_t d = order[k];
    auto first = children.begin() + start[d], last = children.begin() + start[d + 1];
    std::sort(first, last, [&](uint32_t a, uint32_t b) { return in[a].name < in[b].name; });
    for (auto it = first; it != last; ++it) {
      id[*it] = static_cast<uint32_t>(order.size());
      order.push_back(*it);
    }
  }
  if (order.size() != n)
    return Status::InvalidArgument("names not reachable from the root (a loop of parents)");
  std::vector<Node> out(n);
  for (uint32_t k = 0; k < n; k++) {
    Node x = in[order[k]];
    x.parent = id[x.parent];
    if (x.link < n) x.link = id[x.link];  // kNone stays; one out of range stays so, refused
    out[k] = x;
  }
  *nodes = std::move(out);
  for (uint32_t& x : *blob_order)
    if (x < n) x = id[x];
  return id;
}

Result<ErofsImage> ErofsImage::Plan(std::vector<Node> nodes, const Options& opts,
                                    const std::vector<uint32_t>& blob_order) {
  std::vector<uint32_t> order = blob_order;
  auto id = Canonical(&nodes, &order);
  if (!id.ok()) return id.status().Prefixed("erofs image");
  auto img = PlanSorted(std::make_shared<VectorSource>(std::move(nodes), std::move(order)), opts);
  if (img.ok()) img->id_ = std::move(id).value();
  return img;
}

}  // namespace fanstore::image
