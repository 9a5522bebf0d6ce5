// Command testserver is a tiny static HTTP server for the node tests' pods.
//
// It listens on $PORT (default 8080), says so on stderr, and serves:
//
//	/healthz            200 "ok" (readiness probes)
//	/                   "hello from <hostname>"
//	/token              the pod's mounted ServiceAccount token
//	/get?url=U          GET U (plain http) and relay its status and body
//	/apiserver?path=P   GET P from the in-cluster kubernetes Service with the pod's
//	                    token, verifying the apiserver against the mounted ca.crt
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		name, _ := os.Hostname()
		fmt.Fprintf(w, "hello from %s", name)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, _ *http.Request) {
		token, err := os.ReadFile(saDir + "/token")
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(token)
	})
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) {
		relay(w, &http.Client{Timeout: 10 * time.Second}, r.URL.Query().Get("url"), "")
	})
	mux.HandleFunc("/apiserver", apiserver)
	server := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("listening on :%s", port)
	log.Fatal(server.ListenAndServe())
}

func apiserver(w http.ResponseWriter, r *http.Request) {
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	relay(w, client, "https://"+host+r.URL.Query().Get("path"), string(token))
}

func relay(w http.ResponseWriter, client *http.Client, url, token string) {
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if token != "" {
		request.Header.Set("Authorization", "Bearer "+token)
	}
	response, err := client.Do(request)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer response.Body.Close()
	w.WriteHeader(response.StatusCode)
	io.Copy(w, response.Body)
}
