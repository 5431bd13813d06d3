package devdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The cluster asks every connection, on its unix socket too, for the
// password of its role (scram-sha-256): the socket's directory (mode
// 0700, the cluster's user's) keeps other users away, and the password
// keeps away the cluster's own user's other processes, and anyone who
// reaches the socket some other way. The password is made at random on
// first use and kept in the data directory (pgPasswordFile, mode 0600,
// den's user's), which the cluster's user cannot read when it is not
// den's: den gives FerretDB and its index upkeep the URL with it.
//
// A cluster made by an earlier den (trust: no password at all) is moved
// to it on its first start: started with pg_hba.conf allowing den's role
// without a password on the socket alone (whose directory is already
// 0700 and the cluster user's), given its password, and then its
// pg_hba.conf is rewritten and reloaded. A new cluster is made the same
// way (initdb with trust, then this), and so is a cluster whose password
// file was removed.

// pgPasswordFile is the file in the data directory that holds the
// password of the cluster's role.
const pgPasswordFile = "postgresql.password"

// pgHBA is the cluster's pg_hba.conf once it has its password; pgHBAOpen
// is the one it is started with to be given it.
const (
	pgHBA = "# Written by den (den/devdb) at each start: every connection needs the password of\n" +
		"# its role, also on the unix socket. The cluster listens on no TCP port.\n" +
		"local all all scram-sha-256\n"
	pgHBAOpen = "# Written by den (den/devdb) for one start, while it sets the password of\n" +
		"# the role den (on the socket alone, whose directory is the cluster's, 0700).\n" +
		"local all " + pgRole + " trust\n"
)

// clusterPassword returns the password in dir's pgPasswordFile, making
// the file (0600) with a new random password when it is missing; made
// says it was.
func clusterPassword(dir string) (password string, made bool, err error) {
	path := filepath.Join(dir, pgPasswordFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if p := strings.TrimSpace(string(b)); validPassword(p) {
			// Whatever its mode was, the password is den's alone.
			if err := os.Chmod(path, 0o600); err != nil {
				return "", false, fmt.Errorf("devdb: %s: %w", path, err)
			}
			return p, false, nil
		}
		return "", false, fmt.Errorf("devdb: %s does not hold a password den made; remove it, and den sets a new one at its next start", path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("devdb: read %s: %w", path, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("devdb: make a password: %w", err)
	}
	password = hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("devdb: write %s: %w", path, err)
	}
	if _, err := f.WriteString(password + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return "", false, fmt.Errorf("devdb: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("devdb: write %s: %w", path, err)
	}
	return password, true, nil
}

// validPassword reports whether p is a password den made: 64 hex digits,
// which need no quoting in a URL or an SQL literal.
func validPassword(p string) bool {
	if len(p) != 64 {
		return false
	}
	_, err := hex.DecodeString(p)
	return err == nil
}

// hasAuth reports whether the cluster in dir already asks for passwords
// (its pg_hba.conf is pgHBA).
func hasAuth(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "pg_hba.conf"))
	return err == nil && string(b) == pgHBA
}

// writeHBA replaces the cluster's pg_hba.conf with text, owned by u and
// of mode 0600, in one rename.
func writeHBA(dir, text string, u pgUser) error {
	tmp := filepath.Join(dir, "pg_hba.conf.den")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return fmt.Errorf("devdb: write %s: %w", tmp, err)
	}
	if err := u.chown(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devdb: give %s to %s: %w", tmp, u.name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "pg_hba.conf")); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devdb: replace %s's pg_hba.conf: %w", dir, err)
	}
	return nil
}

// setPassword gives the role den its password, over conn (a connection
// the open pg_hba.conf let in), then makes every connection need it.
func (c *cluster) setPassword(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `SET password_encryption = 'scram-sha-256'`); err != nil {
		return fmt.Errorf("devdb: PostgreSQL: %w", err)
	}
	// A utility statement takes no parameters; the password is hex.
	if _, err := conn.Exec(ctx, `ALTER ROLE `+pgx.Identifier{pgRole}.Sanitize()+` PASSWORD `+quoteLiteral(c.password)); err != nil {
		return fmt.Errorf("devdb: PostgreSQL: set the password of %s: %w", pgRole, err)
	}
	if err := writeHBA(c.dir, pgHBA, c.user); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("devdb: PostgreSQL: reload pg_hba.conf: %w", err)
	}
	// The server reads pg_hba.conf again when its postmaster gets to it:
	// until a connection without the password is refused, it may not have.
	for {
		open, err := pgx.Connect(ctx, c.urlAs(pgRole, "", "postgres"))
		if err != nil {
			if isAuthError(err) {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("devdb: PostgreSQL: wait for pg_hba.conf to be read: %w", err)
			}
		} else {
			open.Close(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devdb: PostgreSQL still let den's role in without its password: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isAuthError reports whether err is PostgreSQL's refusal of a password
// (SQLSTATE 28P01, invalid_password).
func isAuthError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "28P01"
}
