"""The native thread pool's code in LLVM IR: `pool_run` publishes a kernel launch in a shared state block and
takes chunks itself; `pool_worker` is each worker thread's loop (spin with `pause`, then sleep on a futex,
claim chunks by ticket, count them done). The runtime's `parallel.native_threads` starts the threads and
calls these; the layout of the state block below is the contract between the two. `jobs_run` runs a
sequence of prepared jobs in one call (a program's consecutive kernel steps, without Python between them).

A launch's items are split into one contiguous shard per thread, each with its own ticket: a thread claims
the chunks of its own shard first, then those left in the others'. Thread t thus runs the same items in
every launch of the same size, and consecutive kernels over the same rows find them in its own cache, not
in the other core's (one shared ticket handed the chunks out in whatever order the threads came: on a
2-core Xeon with AVX-512, ShuffleNet 1.3× slower, its data crossing between the cores at every step);
a thread that comes late still finds its shard taken by the others.
"""
from __future__ import annotations

SPIN_ROUNDS = 1 << 12   # `pause`s a worker spins (tens of microseconds) before it sleeps

# State: i64 words, each group on its own cache line; then one line per shard's ticket.
GEN, BUSY, DONE, SLEEPERS, WAKE_UPS, STOP, PARK, SHARDS = 0, 8, 24, 32, 33, 40, 41, 42
FN, PTRS, DIMS, TOTAL, GRAIN, SCRATCH, STRIDE, SYSCALL = 48, 49, 50, 51, 52, 53, 54, 55
TICKETS = 56      # shard s's ticket: word TICKETS + 8·s
MAX_SHARDS = 64   # threads beyond it share shards
STATE_WORDS = TICKETS + 8 * MAX_SHARDS
JOB_WORDS = 8     # a job of `jobs_run`: where it runs, then `job_launch`'s seven words

def module_source() -> str:
    """The pool's LLVM IR (opaque pointers; the state is an array of i64 words)."""
    w = {name: value for name, value in globals().items() if name.isupper() and isinstance(value, int)}

    def word(name: str) -> str:
        return str(w[name])

    # the published job: state word, IR value, type (the worker's scratch base is %scratch0)
    job = [("FN", "fn", "ptr"), ("PTRS", "ptrs", "ptr"), ("DIMS", "dims", "ptr"), ("TOTAL", "total", "i64"),
           ("GRAIN", "grain", "i64"), ("SCRATCH", "scratch", "ptr"), ("STRIDE", "stride", "i64")]
    job_loads = "\n".join(
        f"  %{v}p = getelementptr i64, ptr %s, i64 {w[f]}\n  %{v}{'0' if v == 'scratch' else ''} = load {t}, ptr %{v}p"
        for f, v, t in job)
    job_fields = "\n".join(f"  %{v}p = getelementptr i64, ptr %job, i64 {i}\n  %{v} = load {t}, ptr %{v}p"
                           for i, (_, v, t) in enumerate(job))
    job_stores = "\n".join(f"  %{v}p = getelementptr i64, ptr %s, i64 {w[f]}\n  store {t} %{v}, ptr %{v}p"
                            for f, v, t in job)

    def ticket_of(shard: str) -> str:
        """%ticketp: the address of shard `shard`'s ticket (an IR value)."""
        return (f"  %line = mul i64 {shard}, 8\n  %word = add i64 %line, {w['TICKETS']}\n"
                f"  %ticketp = getelementptr i64, ptr %s, i64 %word")

    return f"""
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()

define private void @futex(ptr %s, i64 %op, i64 %val) {{
  %sysp = getelementptr i64, ptr %s, i64 {word('SYSCALL')}
  %sys = load ptr, ptr %sysp
  %gen = getelementptr i64, ptr %s, i64 {word('GEN')}
  %r = call i64 (i64, ...) %sys(i64 202, ptr %gen, i64 %op, i64 %val, ptr null)
  ret void
}}

; run chunks of job `gen` until its items are all claimed, its own shard's first (shard tid mod shards), then
; the next shards'; a claim is a compare-and-swap on the shard's ticket (job tag in the high half, items taken
; from the shard in the low half), so a worker that wakes late, or reads the fields of a job already over,
; claims nothing
define private void @work(ptr %s, i64 %tid, i64 %gen) {{
entry:
{job_loads}
  %offset = mul i64 %tid, %stride
  %scratch = getelementptr i8, ptr %scratch0, i64 %offset
  %shardsp = getelementptr i64, ptr %s, i64 {word('SHARDS')}
  %shards = load i64, ptr %shardsp
  %home = urem i64 %tid, %shards
  %donep = getelementptr i64, ptr %s, i64 {word('DONE')}
  %tag = shl i64 %gen, 32
  br label %shard
shard:
  %k = phi i64 [ 0, %entry ], [ %k1, %next_shard ]
  %left = icmp slt i64 %k, %shards
  br i1 %left, label %bounds, label %out
bounds:
  %hk = add i64 %home, %k
  %sid = urem i64 %hk, %shards
  %sid1 = add i64 %sid, 1
  %below = mul i64 %sid, %total
  %first = udiv i64 %below, %shards
  %upto = mul i64 %sid1, %total
  %last = udiv i64 %upto, %shards
{ticket_of('%sid')}
  br label %claim
claim:
  %t = load atomic i64, ptr %ticketp acquire, align 8
  %ttag = and i64 %t, -4294967296
  %ours = icmp eq i64 %ttag, %tag
  br i1 %ours, label %check, label %out
check:
  %taken = and i64 %t, 4294967295
  %lo = add i64 %first, %taken
  %more = icmp slt i64 %lo, %last
  br i1 %more, label %take, label %next_shard
take:
  %end = add i64 %lo, %grain
  %short = icmp slt i64 %end, %last
  %hi = select i1 %short, i64 %end, i64 %last
  %count = sub i64 %hi, %lo
  %next = add i64 %t, %count
  %cas = cmpxchg ptr %ticketp, i64 %t, i64 %next acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %cas, 1
  br i1 %won, label %run, label %claim
run:
  call void %fn(ptr %ptrs, ptr %dims, i64 %lo, i64 %hi, ptr %scratch)
  %ignored = atomicrmw add ptr %donep, i64 %count release
  br label %claim
next_shard:
  %k1 = add i64 %k, 1
  br label %shard
out:
  ret void
}}

define void @pool_worker(ptr %s, i64 %tid) {{
entry:
  %genp = getelementptr i64, ptr %s, i64 {word('GEN')}
  %stopp = getelementptr i64, ptr %s, i64 {word('STOP')}
  %sleepersp = getelementptr i64, ptr %s, i64 {word('SLEEPERS')}
  %wakeupsp = getelementptr i64, ptr %s, i64 {word('WAKE_UPS')}
  %parkp = getelementptr i64, ptr %s, i64 {word('PARK')}
  br label %idle
idle:
  ; generation 0 is the state's initial value: a job published before this worker started still counts
  %seen = phi i64 [ 0, %entry ], [ %g, %finished ], [ %seen, %woke ]
  br label %spin
spin:
  %rounds = phi i64 [ 0, %idle ], [ %rounds1, %pause ]
  %g = load atomic i64, ptr %genp acquire, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %job, label %check_stop
check_stop:
  %stop = load atomic i64, ptr %stopp acquire, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %exit, label %maybe_sleep
maybe_sleep:
  %spun = icmp sge i64 %rounds, {SPIN_ROUNDS}
  %park = load atomic i64, ptr %parkp monotonic, align 8
  %parked = icmp ne i64 %park, 0
  %tired = or i1 %spun, %parked
  br i1 %tired, label %sleep, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  %rounds1 = add i64 %rounds, 1
  br label %spin
sleep:
  %ignored = atomicrmw add ptr %sleepersp, i64 1 seq_cst
  %g2 = load atomic i64, ptr %genp seq_cst, align 8
  %still = icmp eq i64 %g2, %seen
  br i1 %still, label %wait, label %woke
wait:
  %seen32 = and i64 %seen, 4294967295
  call void @futex(ptr %s, i64 128, i64 %seen32)
  br label %woke
woke:
  %ignored2 = atomicrmw sub ptr %sleepersp, i64 1 seq_cst
  %ignored3 = atomicrmw add ptr %wakeupsp, i64 1 monotonic   ; (how often workers slept: tests, diagnostics)
  br label %idle
job:
  call void @work(ptr %s, i64 %tid, i64 %g)
  br label %finished
finished:
  br label %idle
exit:
  ret void
}}

; 1 when the job ran on the pool, 0 when the pool was busy and it ran on the calling thread alone
define i64 @pool_run(ptr %s, ptr %fn, ptr %ptrs, ptr %dims, i64 %total, i64 %grain, ptr %scratch,
                     i64 %stride) {{
entry:
  %busyp = getelementptr i64, ptr %s, i64 {word('BUSY')}
  %taken = cmpxchg ptr %busyp, i64 0, i64 1 acquire monotonic
  %ok = extractvalue {{ i64, i1 }} %taken, 1
  br i1 %ok, label %publish, label %inline
inline:
  call void %fn(ptr %ptrs, ptr %dims, i64 0, i64 %total, ptr %scratch)
  ret i64 0
publish:
{job_stores}
  %donep = getelementptr i64, ptr %s, i64 {word('DONE')}
  store atomic i64 0, ptr %donep monotonic, align 8
  %genp = getelementptr i64, ptr %s, i64 {word('GEN')}
  %current = load atomic i64, ptr %genp monotonic, align 8
  %job = add i64 %current, 1
  %jobtag = shl i64 %job, 32
  %shardsp = getelementptr i64, ptr %s, i64 {word('SHARDS')}
  %shards = load i64, ptr %shardsp
  br label %tag_shard
tag_shard:   ; every shard's ticket: the new job's tag, nothing taken
  %j = phi i64 [ 0, %publish ], [ %j1, %tag_one ]
  %untagged = icmp slt i64 %j, %shards
  br i1 %untagged, label %tag_one, label %tagged
tag_one:
{ticket_of('%j')}
  store atomic i64 %jobtag, ptr %ticketp release, align 8
  %j1 = add i64 %j, 1
  br label %tag_shard
tagged:
  store atomic i64 %job, ptr %genp seq_cst, align 8
  call void @pool_wake(ptr %s)
  call void @work(ptr %s, i64 0, i64 %job)
  br label %join
join:   ; every item done (workers still asleep are not waited for: they will find the job over)
  %done = load atomic i64, ptr %donep acquire, align 8
  %all = icmp sge i64 %done, %total
  br i1 %all, label %release, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  br label %join
release:
  store atomic i64 0, ptr %busyp release, align 8
  ret i64 1
}}

; workers asleep wake (to find a job just published, or without one: they spin again, ready for the
; launches about to come)
define void @pool_wake(ptr %s) {{
entry:
  %sleepersp = getelementptr i64, ptr %s, i64 {word('SLEEPERS')}
  %sleepers = load atomic i64, ptr %sleepersp seq_cst, align 8
  %asleep = icmp sgt i64 %sleepers, 0
  br i1 %asleep, label %wake, label %done
wake:
  call void @futex(ptr %s, i64 129, i64 2147483647)
  br label %done
done:
  ret void
}}

; a prepared job (`Job`): its words are pool_run's arguments after the state, in order
define i64 @job_launch(ptr %s, ptr %job) {{
{job_fields}
  %r = call i64 @pool_run(ptr %s, ptr %fn, ptr %ptrs, ptr %dims, i64 %total, i64 %grain, ptr %scratch,
                          i64 %stride)
  ret i64 %r
}}

; a prepared job run on the calling thread alone, with thread 0's scratchpad
define i64 @job_inline(ptr %s, ptr %job) {{
{job_fields}
  call void %fn(ptr %ptrs, ptr %dims, i64 0, i64 %total, ptr %scratch)
  ret i64 0
}}

; `count` jobs one after another (a program's run of kernel steps), each JOB_WORDS words: 1 to run it on
; the pool (then %s is the pool's state, else it may be null), 0 on this thread alone; then the job's words.
; %stamps: null, or count + 1 words: the cycle counter before the first job and after each (a profile's
; step times, without anything between the steps)
define void @jobs_run(ptr %s, ptr %jobs, i64 %count, ptr %stamps) {{
entry:
  %timed = icmp ne ptr %stamps, null
  br i1 %timed, label %stamp0, label %next
stamp0:
  %c0 = call i64 @llvm.readcyclecounter()
  store i64 %c0, ptr %stamps
  br label %next
next:
  %i = phi i64 [ 0, %entry ], [ 0, %stamp0 ], [ %i1, %ran ], [ %i1, %stamp ]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %job, label %done
job:
  %first = mul i64 %i, {JOB_WORDS}
  %flagp = getelementptr i64, ptr %jobs, i64 %first
  %flag = load i64, ptr %flagp
  %words = getelementptr i64, ptr %flagp, i64 1
  %pooled = icmp ne i64 %flag, 0
  br i1 %pooled, label %onpool, label %inline
onpool:
  %r = call i64 @job_launch(ptr %s, ptr %words)
  br label %ran
inline:
  %r1 = call i64 @job_inline(ptr %s, ptr %words)
  br label %ran
ran:
  %i1 = add i64 %i, 1
  br i1 %timed, label %stamp, label %next
stamp:
  %c = call i64 @llvm.readcyclecounter()
  %at = getelementptr i64, ptr %stamps, i64 %i1
  store i64 %c, ptr %at
  br label %next
done:
  ret void
}}
"""
