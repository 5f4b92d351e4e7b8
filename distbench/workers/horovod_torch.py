"""Strategy `horovod-torch`: horovod.torch with gradient all-reduce (averaging) and initial broadcast.

Launched by horovodrun (Gloo controller here; MPI where Horovod was built with it).
"""

from __future__ import annotations

from distbench.workers import common

FRAMEWORK = "torch"


def make_distribution():
    import horovod.torch as hvd
    import torch

    from distbench.workers import torch_common as tc
    from distbench.workers.comm_common import horovod_backend, horovod_init

    class HorovodDistribution(tc.Distribution):
        name = "horovod"
        nosync_variant = (
            "hvd.DistributedOptimizer with its gradient hooks, queue and fusion buffer kept, "
            "all-reducing over a process set of this rank alone: the exchange between ranks removed, "
            "and with it the average's 1/N scaling pass (Horovod skips a scale of 1 for one rank; "
            "the optimizer has no post-scale argument to keep it)"
        )

        def start(self, cfg):
            self.process_sets = horovod_init(hvd, cfg)
            self.rank, self.world, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
            self.backend = horovod_backend(hvd, cfg.device)
            if hvd.cross_size() != cfg.nodes:
                raise RuntimeError(f"launched over {hvd.cross_size()} node(s) but the point asks for {cfg.nodes}")

        def _wrap(self, cfg, model, optimizer, device):
            optimizer = hvd.DistributedOptimizer(
                optimizer,
                named_parameters=model.named_parameters(),
                op=hvd.Average,
                process_set=self.process_sets[cfg.sync],
            )
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            return model, optimizer

        def wrap_independent(self, cfg, model, optimizer, device):
            return self.wrap(cfg, model, optimizer, device)  # over this rank's own process set

        def rewrap(self, cfg, model, optimizer, wrapped_optimizer, device):
            # The same DistributedOptimizer (a second one would add a second set of gradient hooks), now
            # reducing over the other process set. Rank 0's weights and momentum again: the variant let them
            # drift apart.
            wrapped_optimizer.process_set = self.process_sets[cfg.sync]
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(wrapped_optimizer, root_rank=0)
            return model, wrapped_optimizer

        def wrap(self, cfg, model, optimizer, device):
            grads = sum(p.numel() for p in model.parameters() if p.requires_grad)
            self._tiny = torch.zeros(common.tiny_elements(grads), device=device)
            return self._wrap(cfg, model, optimizer, device)

        def tiny_collective(self):
            # After backward, before the optimizer's synchronize(): a few floats over every rank (the global set).
            hvd.allreduce_(self._tiny, op=hvd.Sum, name="distbench.tiny", process_set=self.process_sets[True])
            self.tiny_calls += 1

        def gather(self, obj):
            return hvd.allgather_object(obj)

        def barrier(self):
            hvd.barrier()

        def mean(self, value):
            return float(hvd.allreduce(torch.tensor([value], dtype=torch.float64), op=hvd.Average).item())

        def allreduce_seconds(self, cfg, model, wrapped):
            # Same tensors as the gradients, through Horovod's grouped all-reduce (fusion buffer).
            grads = [torch.zeros_like(p) for p in model.parameters() if p.requires_grad]
            sync = tc.make_sync(grads[0].device)

            def op():
                hvd.grouped_allreduce(grads, op=hvd.Average)
                sync(None)

            return common.time_collective(op, self.barrier)

        def stop(self):
            hvd.shutdown()

    return HorovodDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
