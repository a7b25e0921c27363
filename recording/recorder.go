package recording

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Redacted replaces the values of headers that carry secrets.
const Redacted = "REDACTED"

const (
	// queueSize bounds the records waiting for the writer: about a second
	// of a busy gateway, and a few MB at most, before lines are dropped.
	queueSize = 4096
	// flushInterval bounds how long a written line may sit in the buffer.
	flushInterval = time.Second
)

// FileRecorder appends records to a file as JSON lines.
//
// Record never blocks: records go through a bounded queue to one writer
// goroutine, which redacts, encodes and writes them through a buffer
// flushed every second and on Close (a write per line would cost a system
// call per delivery exactly when load is highest).
// When the queue is full a record is dropped and counted (Dropped); when a
// write fails the lines lost are counted (Failed) and the error is logged,
// so a full disk or a bad path costs the recording, never a delivery.
type FileRecorder struct {
	path   string
	redact map[string]bool // lower-case header names
	logger *zap.Logger

	mu     sync.RWMutex // Record holds it shared so Close cannot close queue under a send
	closed bool
	queue  chan Record
	done   chan struct{}

	dropped, failed atomic.Uint64

	// Owned by the writer goroutine.
	file     *os.File // nil while the file cannot be opened
	buf      *bufio.Writer
	line     []byte // one encoded line, reused
	pending  uint64 // lines in buf since the last successful flush
	failing  bool   // the last write or open failed; logged once until it recovers
	torn     bool   // the file may end in part of a line (a failed write, a lost machine)
	reported uint64 // dropped+failed when last logged
	closeErr error
}

// NewFileRecorder starts a recorder appending to path, creating its
// directory. Authorization is always redacted, and so is every header
// named in redact, case-insensitively.
//
// When path cannot be opened the error says why, and the recorder returned
// with it is still usable and must still be closed: it counts every record
// as failed and tries to open path again every second. The caller chooses
// between logging the error and going on, or stopping.
func NewFileRecorder(path string, redact []string, logger *zap.Logger) (*FileRecorder, error) {
	r := &FileRecorder{
		path:   path,
		redact: map[string]bool{"authorization": true},
		logger: logger,
		queue:  make(chan Record, queueSize),
		done:   make(chan struct{}),
	}
	for _, name := range redact {
		r.redact[strings.ToLower(name)] = true
	}
	err := r.open()
	if err != nil {
		r.failing = true // the caller has the error to log
	}
	go r.run()
	return r, err
}

// Record queues rec for writing. The caller hands rec over: its headers
// are redacted in place, later, by the writer.
//
// The writer always writes the body as body_base64, so that any bytes
// survive. A caller may therefore set Body to a copy of the raw body
// instead of BodyBase64 and leave the encoding to the writer goroutine:
// that keeps it off the request path.
func (r *FileRecorder) Record(rec Record) {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.dropped.Add(1)
		return
	}
	select {
	case r.queue <- rec:
	default:
		r.dropped.Add(1)
	}
}

// Dropped returns how many records were dropped because the queue was full
// (or the recorder closed).
func (r *FileRecorder) Dropped() uint64 { return r.dropped.Load() }

// Failed returns how many records were lost to write errors.
func (r *FileRecorder) Failed() uint64 { return r.failed.Load() }

// Close writes what is queued, flushes and closes the file. Records that
// arrive after Close are dropped.
func (r *FileRecorder) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	<-r.done
	return r.closeErr
}

func (r *FileRecorder) open() error {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		return fmt.Errorf("record: create directory: %w", err)
	}
	// 0600: recordings hold request bodies, which may be personal data.
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	r.file = f
	r.torn = !endsLine(r.path)
	r.buf = bufio.NewWriterSize(f, 64<<10)
	return nil
}

// endsLine reports whether the file at path is empty or ends a line. A
// machine that lost power mid-write leaves part of one, and the next line
// must start on its own; a file it may not read is taken as such, which
// costs a blank line at most.
func endsLine(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	if fi.Size() == 0 {
		return true
	}
	last := make([]byte, 1)
	_, err = f.ReadAt(last, fi.Size()-1)
	return err == nil && last[0] == '\n'
}

func (r *FileRecorder) run() {
	defer close(r.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	for {
		select {
		case rec, ok := <-r.queue:
			if !ok {
				r.flush()
				r.reportLosses()
				if r.file != nil {
					r.closeErr = errors.Join(r.closeErr, r.file.Close())
				}
				return
			}
			r.write(rec)
		case <-tick.C:
			r.flush()
			r.reportLosses()
			if r.file == nil {
				if err := r.open(); err == nil {
					r.logger.Info("recording resumed", zap.String("path", r.path))
					r.failing = false
				}
			}
		}
	}
}

func (r *FileRecorder) write(rec Record) {
	if r.file == nil {
		r.failed.Add(1)
		return
	}
	for name, values := range rec.Headers {
		if r.redact[strings.ToLower(name)] {
			for i := range values {
				values[i] = Redacted
			}
		}
	}
	if rec.Source == "" {
		rec.Source = rec.SourceName()
	}
	if rec.Body != "" && rec.BodyBase64 == "" {
		rec.BodyBase64, rec.Body = base64.StdEncoding.EncodeToString([]byte(rec.Body)), ""
	}
	// The line starts with the newline that ends a torn one, if need be.
	var err error
	if r.line, err = appendRecord(append(r.line[:0], '\n'), &rec); err != nil {
		r.lose(fmt.Errorf("record: encode: %w", err), 1, false)
		return
	}
	// A line that does not fit in the buffer goes after a flush, not
	// across one: a process killed between two writes leaves whole lines.
	if r.buf.Buffered() > 0 && len(r.line) > r.buf.Available() {
		r.flush()
	}
	line := r.line[1:]
	if r.torn {
		line = r.line
	}
	if _, err := r.buf.Write(line); err != nil {
		r.lose(fmt.Errorf("record: write %s: %w", r.path, err), r.pending+1, true)
		return
	}
	r.torn = false
	r.pending++
}

func (r *FileRecorder) flush() {
	if r.buf == nil || r.buf.Buffered() == 0 {
		return
	}
	if err := r.buf.Flush(); err != nil {
		r.lose(fmt.Errorf("record: write %s: %w", r.path, err), r.pending, true)
		r.closeErr = err
		return
	}
	r.pending = 0
	r.closeErr = nil
	if r.failing {
		r.failing = false
		r.logger.Info("recording resumed", zap.String("path", r.path))
	}
}

// lose counts lines that will never reach the file. After a failed write
// the buffer is emptied, so the next line starts afresh.
func (r *FileRecorder) lose(err error, lines uint64, wrote bool) {
	r.failed.Add(lines)
	if wrote {
		r.pending = 0
		r.buf.Reset(r.file)
		r.torn = true
	}
	if !r.failing {
		r.failing = true
		r.logger.Error("recording failed; deliveries go on unrecorded", zap.String("path", r.path), zap.Error(err))
	}
}

// reportLosses logs, at most once per flush interval, how many lines were
// lost since the last report: one line per lost record would flood the log
// exactly when the disk is full.
func (r *FileRecorder) reportLosses() {
	dropped, failed := r.dropped.Load(), r.failed.Load()
	if lost := dropped + failed; lost > r.reported {
		r.logger.Warn("recording lost lines",
			zap.String("path", r.path),
			zap.Uint64("lost", lost-r.reported),
			zap.Uint64("dropped_total", dropped),
			zap.Uint64("failed_total", failed))
		r.reported = lost
	}
}

// discard is a recorder that records nothing.
type discard struct{}

// Record does nothing.
func (discard) Record(Record) {}

// Discard is the recorder of sources that do not record.
var Discard discard
