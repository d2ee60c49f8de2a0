package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.ObjectNode

/** Minimal JSON helpers over Jackson (already on Spark's classpath). */
private[sparkstate] object Json {
  private val mapper = new ObjectMapper()

  def parse(text: String): JsonNode = mapper.readTree(text)

  def obj(): ObjectNode = mapper.createObjectNode()

  def write(node: JsonNode): String = mapper.writeValueAsString(node)

  def long(node: JsonNode, path: String*): Long = {
    var n = node
    path.foreach(p => n = if (n == null) null else n.get(p))
    if (n == null || n.isNull) 0L else n.asLong()
  }

  def double(node: JsonNode, path: String*): Double = {
    var n = node
    path.foreach(p => n = if (n == null) null else n.get(p))
    if (n == null || n.isNull) 0.0 else n.asDouble()
  }

  def text(node: JsonNode, field: String): String = {
    val n = node.get(field)
    if (n == null || n.isNull) "" else n.asText()
  }
}
