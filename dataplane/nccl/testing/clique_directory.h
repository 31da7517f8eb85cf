// Where the ranks of one stand-in NCCL communicator meet when they live in
// different processes (testing/cuda_nccl_standin.cc, with
// $RANKD_STANDIN_CLIQUE_DIR set): a directory per unique id, holding one
// small file per fact a peer must see. Test-only, like the stand-in.
//
//   join.<rank>              the rank joined; holds its placement (host
//                            and GPU, as the stand-in names them)
//   launch.<rank>            the rank launched its first kernel
//   op.<seq>.<rank>          the rank's contribution to collective <seq>:
//                            its signature (what it called) and its bytes
//   msg.<from>.<to>.<n>      the <n>th message from <from> to <to>; the
//                            receiver removes it, which tells the sender it
//                            was taken
//
// Every file is written under a temporary name and renamed, so a reader
// sees all of it or nothing. Calls never block: the stand-in polls them
// (a kernel that waits for a dead peer waits until its communicator is
// aborted, as a real one does). Contributions stay until the directory is
// removed by whoever made it (a test's temporary directory): peers may
// read them at any time, and tests move little data.
//
// Not thread-safe; the stand-in calls it under its one lock. Depends only
// on the C++ standard library and POSIX.
#ifndef RANKD_DATAPLANE_NCCL_TESTING_CLIQUE_DIRECTORY_H_
#define RANKD_DATAPLANE_NCCL_TESTING_CLIQUE_DIRECTORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rankd::dataplane::nccl::testing {

// One rank's contribution to a collective.
struct Contribution {
  std::string signature;  // opaque to the directory; equal when ranks agree
  std::vector<char> data;
};

class CliqueDirectory {
 public:
  // The meeting directory of the communicator whose unique id is `id`
  // (`id_bytes` bytes; the name uses its first 16) under `root`, created
  // if needed. A relative `root` is taken under $TEST_TMPDIR when that is
  // set. Null with `*error` set when the directory cannot be made.
  static std::unique_ptr<CliqueDirectory> Open(const std::string& root,
                                               const char* id, size_t id_bytes,
                                               int nranks, std::string* error);

  // Records that `rank` joined at `placement` (where it runs: opaque to
  // the directory). False on an I/O error.
  bool Join(int rank, const std::string& placement);
  // Every rank's placement, by rank, once all `nranks` joined; empty
  // before.
  std::vector<std::string> JoinedPlacements() const;

  // Records that `rank` launched a kernel. False on an I/O error.
  bool MarkLaunched(int rank);
  // Whether every rank launched at least once.
  bool AllLaunched() const;

  // Publishes `rank`'s contribution to collective `seq`. False on an I/O
  // error.
  bool Post(uint64_t seq, int rank, const Contribution& contribution);
  // Whether every rank posted its contribution to `seq` (cheap: reads no
  // contents).
  bool AllPosted(uint64_t seq) const;
  // Every rank's contribution to `seq`, by rank, once all posted; false
  // (and `*out` untouched) while one is missing.
  bool Collect(uint64_t seq, std::vector<Contribution>* out) const;
  // Takes back `rank`'s contribution to `seq` (an aborted kernel leaves;
  // its peers then wait for it, as NCCL's do).
  void Withdraw(uint64_t seq, int rank);

  // Posts the `n`th message from `from` to `to`. False on an I/O error.
  bool Send(int from, int to, uint64_t n, const std::vector<char>& bytes);
  // Whether the receiver took message `n` from `from` to `to`.
  bool Taken(int from, int to, uint64_t n) const;
  // Takes message `n` from `from` to `to` into `*bytes` (removing it);
  // false while it has not arrived.
  bool Receive(int from, int to, uint64_t n, std::vector<char>* bytes);
  // Takes back an untaken message (its sender was aborted).
  void Unsend(int from, int to, uint64_t n);

 private:
  CliqueDirectory(std::string path, int nranks)
      : path_(std::move(path)), nranks_(nranks) {}
  std::string File(const std::string& name) const;

  const std::string path_;
  const int nranks_;
};

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_CLIQUE_DIRECTORY_H_
