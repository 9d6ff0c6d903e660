// etcdactor is a real Go etcd client (etcd's own clientv3/concurrency
// package) that tests script line by line: one command per stdin line, one
// answer line per event on stdout. It opens ONE concurrency.Session and keeps
// it for its life, so every election and mutex below shares one lease, as in
// a Go service.
//
// Build (GOPATH mode, Debian's golang-etcd-server-dev):
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o etcdactor .
//
// Commands and answers:
//
//	campaign NAME VALUE  -> "elected NAME REV KEY" once won (Campaign runs in
//	                        the background), or "campaign-error NAME MSG"
//	resign NAME          -> "resign ok NAME" | "resign err NAME MSG"
//	proclaim NAME VALUE  -> "proclaim ok NAME" | "proclaim err NAME MSG"
//	leader NAME          -> "leader NAME KEY VALUE CREATEREV" | "leader NAME none" | "leader NAME err MSG"
//	lock KEY             -> "locked KEY REV" (Lock runs in the background) | "lock err KEY MSG"
//	unlock KEY           -> "unlock ok KEY" | "unlock err KEY MSG"
//	owner KEY            -> "owner KEY true|false" (a txn If(Mutex.IsOwner())) | "owner err KEY MSG"
//	lease                -> "lease HEX TTL" (TimeToLive of the session's lease) | "lease err MSG"
//	close                -> "close ok" (Session.Close: revokes the lease)
//
// Elections live under "election/NAME" (as etcdctl elect and tenure's queue
// layout: keys election/NAME/<lease-hex>). At start it prints "ready HEX";
// when Session.Done() closes it prints "session-done". On stdin EOF it exits
// without revoking (the lease expires), as a killed service would.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const opTimeout = 5 * time.Second

type actor struct {
	cli       *clientv3.Client
	sess      *concurrency.Session
	outMu     sync.Mutex
	mu        sync.Mutex
	elections map[string]*concurrency.Election
	mutexes   map[string]*concurrency.Mutex
}

func (a *actor) say(format string, args ...interface{}) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	line := fmt.Sprintf(format, args...)
	line = strings.ReplaceAll(line, "\n", " ")
	fmt.Fprintln(os.Stdout, line)
}

func (a *actor) election(name string) *concurrency.Election {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.elections[name]
	if !ok {
		e = concurrency.NewElection(a.sess, "election/"+name)
		a.elections[name] = e
	}
	return e
}

func (a *actor) mutex(key string) *concurrency.Mutex {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.mutexes[key]
	if !ok {
		m = concurrency.NewMutex(a.sess, key)
		a.mutexes[key] = m
	}
	return m
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func (a *actor) handle(fields []string) {
	if len(fields) == 0 {
		return
	}
	arg := func(i int) string {
		if i < len(fields) {
			return fields[i]
		}
		return ""
	}
	switch fields[0] {
	case "campaign":
		name, value := arg(1), arg(2)
		e := a.election(name)
		go func() {
			if err := e.Campaign(context.Background(), value); err != nil {
				a.say("campaign-error %s %v", name, err)
				return
			}
			a.say("elected %s %d %s", name, e.Rev(), e.Key())
		}()
	case "resign":
		name := arg(1)
		c, cancel := ctx()
		defer cancel()
		if err := a.election(name).Resign(c); err != nil {
			a.say("resign err %s %v", name, err)
		} else {
			a.say("resign ok %s", name)
		}
	case "proclaim":
		name, value := arg(1), arg(2)
		c, cancel := ctx()
		defer cancel()
		if err := a.election(name).Proclaim(c, value); err != nil {
			a.say("proclaim err %s %v", name, err)
		} else {
			a.say("proclaim ok %s", name)
		}
	case "leader":
		name := arg(1)
		c, cancel := ctx()
		defer cancel()
		resp, err := a.election(name).Leader(c)
		switch {
		case err == concurrency.ErrElectionNoLeader:
			a.say("leader %s none", name)
		case err != nil:
			a.say("leader %s err %v", name, err)
		default:
			kv := resp.Kvs[0]
			a.say("leader %s %s %s %d", name, kv.Key, kv.Value, kv.CreateRevision)
		}
	case "lock":
		key := arg(1)
		m := a.mutex(key)
		go func() {
			if err := m.Lock(context.Background()); err != nil {
				a.say("lock err %s %v", key, err)
				return
			}
			a.say("locked %s %d", key, m.Header().Revision)
		}()
	case "unlock":
		key := arg(1)
		c, cancel := ctx()
		defer cancel()
		if err := a.mutex(key).Unlock(c); err != nil {
			a.say("unlock err %s %v", key, err)
		} else {
			a.say("unlock ok %s", key)
		}
	case "owner":
		key := arg(1)
		c, cancel := ctx()
		defer cancel()
		resp, err := a.cli.Txn(c).If(a.mutex(key).IsOwner()).Commit()
		if err != nil {
			a.say("owner err %s %v", key, err)
		} else {
			a.say("owner %s %t", key, resp.Succeeded)
		}
	case "lease":
		c, cancel := ctx()
		defer cancel()
		resp, err := a.cli.TimeToLive(c, a.sess.Lease())
		if err != nil {
			a.say("lease err %v", err)
		} else {
			a.say("lease %x %d", int64(a.sess.Lease()), resp.TTL)
		}
	case "close":
		err := a.sess.Close()
		a.say("close ok %v", err)
	default:
		a.say("unknown-command %s", fields[0])
	}
}

func main() {
	endpoints := flag.String("endpoints", "http://127.0.0.1:2379", "comma-separated etcd endpoints")
	ttl := flag.Int("ttl", 10, "session TTL in seconds")
	flag.Parse()

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: opTimeout,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcdactor: connect: %v\n", err)
		os.Exit(1)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(*ttl))
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcdactor: session: %v\n", err)
		os.Exit(1)
	}
	a := &actor{
		cli:       cli,
		sess:      sess,
		elections: map[string]*concurrency.Election{},
		mutexes:   map[string]*concurrency.Mutex{},
	}
	go func() {
		<-sess.Done()
		a.say("session-done")
	}()
	a.say("ready %x", int64(sess.Lease()))

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		a.handle(strings.Fields(in.Text()))
	}
	// EOF: leave without revoking, as a killed service would.
	os.Exit(0)
}
