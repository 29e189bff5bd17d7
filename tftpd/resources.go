package tftpd

import (
	"errors"
	"fmt"
	"syscall"
)

// fdExhausted reports whether err is the process (EMFILE) or the system
// (ENFILE) running out of file descriptors: a passing shortage, not a
// fault of the request or of the file.
func fdExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// describe says what a resource error is in words an operator acts on;
// other errors are returned as they are.
func describe(err error) error {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("out of file descriptors: the process is at its open-file limit (RLIMIT_NOFILE; lower tftp.max_transfers or raise LimitNOFILE): %w", err)
	case errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("out of file descriptors: the system's open-file table is full (fs.file-max): %w", err)
	}
	return err
}
