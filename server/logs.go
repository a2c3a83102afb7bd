package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podlogs"
)

// LogOptions are a container log request's parameters (from v1.PodLogOptions).
type LogOptions struct {
	Follow bool
	// Tail is the number of lines from the end to start at; negative means all.
	Tail int64
	// Since skips entries older than it; zero means no limit.
	Since      time.Time
	Timestamps bool
	// LimitBytes stops the output after that many bytes; 0 or less means no limit.
	LimitBytes int64
}

// logEntry is one line of a CRI log file: "<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <msg>".
type logEntry struct {
	ts      time.Time
	stream  string
	partial bool
	msg     []byte
}

// parseCRILogLine parses a line without its trailing newline.
func parseCRILogLine(line []byte) (logEntry, error) {
	var e logEntry
	tsEnd := bytes.IndexByte(line, ' ')
	if tsEnd < 0 {
		return e, fmt.Errorf("no timestamp delimiter in log line %q", truncate(line))
	}
	ts, err := time.Parse(time.RFC3339Nano, string(line[:tsEnd]))
	if err != nil {
		return e, fmt.Errorf("parsing the log line timestamp: %w", err)
	}
	rest := line[tsEnd+1:]
	sEnd := bytes.IndexByte(rest, ' ')
	if sEnd < 0 {
		return e, fmt.Errorf("no stream delimiter in log line %q", truncate(line))
	}
	stream := string(rest[:sEnd])
	if stream != "stdout" && stream != "stderr" {
		return e, fmt.Errorf("unexpected stream %q in log line", stream)
	}
	rest = rest[sEnd+1:]
	// The tag field is "P" or "F", possibly followed by ":"-separated extra tags; a
	// runtime that writes no tag field at all gives a full line.
	tagEnd := bytes.IndexByte(rest, ' ')
	var tag []byte
	if tagEnd < 0 {
		tag, rest = rest, nil
	} else {
		tag, rest = rest[:tagEnd], rest[tagEnd+1:]
	}
	if i := bytes.IndexByte(tag, ':'); i >= 0 {
		tag = tag[:i]
	}
	switch string(tag) {
	case "P":
		e.partial = true
	case "F":
	default:
		return e, fmt.Errorf("unexpected tag %q in log line", tag)
	}
	e.ts, e.stream, e.msg = ts, stream, rest
	return e, nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// errLimitReached ends a read once limitBytes have been written.
var errLimitReached = errors.New("log output limit reached")

// timeFormatOut is how a requested timestamp is written: fixed-width
// RFC 3339 with nanoseconds, as the kubelet writes it (cri-client's
// logs.RFC3339NanoFixed), so `kubectl logs --timestamps` reads the same.
const timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"

// logWriter writes entries with the requested decoration and byte limit.
type logWriter struct {
	w          io.Writer
	timestamps bool
	since      time.Time
	remain     int64 // < 0: unlimited
	buf        []byte
	// midLine is set after a partial entry: the next entry continues its line,
	// so it gets no timestamp of its own (as upstream's ReadLogs).
	midLine bool
}

// write writes e unless it is older than since; either way e decides whether
// the next entry starts a line.
func (lw *logWriter) write(e logEntry) error {
	midLine := lw.midLine
	lw.midLine = e.partial
	if e.ts.Before(lw.since) {
		return nil
	}
	lw.buf = lw.buf[:0]
	if lw.timestamps && !midLine {
		lw.buf = append(lw.buf, e.ts.Format(timeFormatOut)...)
		lw.buf = append(lw.buf, ' ')
	}
	lw.buf = append(lw.buf, e.msg...)
	if !e.partial {
		lw.buf = append(lw.buf, '\n')
	}
	out := lw.buf
	if lw.remain >= 0 && int64(len(out)) > lw.remain {
		out = out[:lw.remain]
	}
	n, err := lw.w.Write(out)
	if err != nil {
		return err
	}
	if lw.remain >= 0 {
		lw.remain -= int64(n)
		if lw.remain <= 0 {
			return errLimitReached
		}
	}
	return nil
}

// tailStart returns the offset of the start of the last n lines of f (n >= 0).
func tailStart(f *os.File, n int64) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if n == 0 {
		return size, nil
	}
	const block = 4096
	buf := make([]byte, block)
	// The final newline ends the last line; it does not start another.
	var seen int64
	end := size
	for end > 0 {
		start := end - block
		if start < 0 {
			start = 0
		}
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' || start+int64(i) == size-1 {
				continue
			}
			seen++
			if seen == n {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// runningCheckEvery is how many idle polls pass between container state checks.
const runningCheckEvery = 4

// logFollower is how ReadLogs learns when a followed container has stopped.
type logFollower struct {
	// running reports whether the container still runs (and may write more).
	running func(ctx context.Context) bool
	clock   clock.WithTicker
	poll    time.Duration
}

// ReadLogs writes the CRI log file at path to w as opts asks. When following, it polls
// the file for more, reopens it when it is rotated (a new file under the same name), and
// returns once the container has stopped and the file is drained, or ctx ends.
//
// The pods' log directory is reachable from pods that mount it (hostPath), so the
// file is opened (and reopened) with podlogs.Open: no component below that
// directory may be a link (one could point the API at any host file), and only a
// regular file is opened (a FIFO would hang the reader).
//
// Why this is not k8s.io/cri-client/pkg/logs.ReadLogs, the reader the kubelet and
// crictl share (docs/SECURITY.md round 3 item 3): ReadLogs takes a path, not an
// open file. It calls filepath.EvalSymlinks on it, then os.Open on the result,
// which follows every link, opens a FIFO (blocking) and takes a file of several
// hard links; when following, a Create event for the file's name makes it
// os.Open the path again. A /proc/self/fd/N path for the file podlogs.Open opened
// does not help: EvalSymlinks turns it back into the file's path and ReadLogs
// reopens that, the race podlogs.Open closes. Its parser, tail and writer are
// unexported. So nodelet keeps its reader and matches ReadLogs' output: the
// fixed-width timestamp, a timestamp only at the start of a line written in
// pieces, lines older than since skipped, unparsable lines skipped, limitBytes
// cutting mid-line, follow ending once the container is no longer running (an
// Unavailable runtime counts as running) and the file is drained. Where it
// differs: it follows by polling (fol.poll; ReadLogs waits on fsnotify with a
// 1 s fallback) and asks the runtime at most every runningCheckEvery polls
// (ReadLogs asks before every wait); it notices rotation by comparing the open
// file's inode with the name's (ReadLogs by a Create event for the name), and
// finishes the old file first either way; it reads CRI-format files only (ReadLogs
// also reads Docker's JSON lines, which containerd never writes); without
// follow, it leaves out an unterminated last line (ReadLogs writes it), and with
// a tail it reads to the end of the file (ReadLogs stops after the tail's count).
func ReadLogs(ctx context.Context, path string, opts LogOptions, w io.Writer, fol logFollower) error {
	f, err := podlogs.Open(path)
	if err != nil {
		return fmt.Errorf("opening the container log %s: %w", path, err)
	}
	defer func() { f.Close() }()
	if opts.Tail >= 0 {
		off, err := tailStart(f, opts.Tail)
		if err != nil {
			return fmt.Errorf("finding the last %d lines of %s: %w", opts.Tail, path, err)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return fmt.Errorf("seeking in %s: %w", path, err)
		}
	}
	lw := &logWriter{w: w, timestamps: opts.Timestamps, since: opts.Since, remain: -1}
	if opts.LimitBytes > 0 {
		lw.remain = opts.LimitBytes
	}
	r := bufio.NewReader(f)
	var pending []byte // an incomplete last line, completed by a later read
	var ticker clock.Ticker
	var stoppedOnce bool
	idle := 0
	for {
		line, err := r.ReadBytes('\n')
		if err == nil {
			if len(pending) > 0 {
				line = append(pending, line...)
				pending = nil
			}
			e, perr := parseCRILogLine(line[:len(line)-1])
			if perr != nil {
				// Upstream skips lines it cannot parse rather than failing the stream.
				continue
			}
			if werr := lw.write(e); werr != nil {
				if errors.Is(werr, errLimitReached) {
					return nil
				}
				return werr
			}
			continue
		}
		if err != io.EOF {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		pending = append(pending, line...)
		if !opts.Follow {
			return nil
		}
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
		// Rotated: the name now points at a new file. Finish the old one (done: we are at
		// its EOF) and continue from the start of the new one.
		if rotated(f, path) {
			nf, err := podlogs.Open(path)
			if err == nil {
				f.Close()
				f, r, pending = nf, bufio.NewReader(nf), nil
				continue
			}
		}
		if stoppedOnce {
			return nil
		}
		// Asking the runtime costs a CRI call: once a second is enough.
		idle++
		if fol.running != nil && idle%runningCheckEvery == 1 && !fol.running(ctx) {
			// One more pass drains what the container wrote before it exited.
			stoppedOnce = true
			continue
		}
		if ticker == nil {
			ticker = fol.clock.NewTicker(fol.poll)
			defer ticker.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// rotated says whether path names a different file than f.
func rotated(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	if err != nil {
		return false
	}
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return false
	}
	return sa.Ino != sb.Ino || sa.Dev != sb.Dev
}
